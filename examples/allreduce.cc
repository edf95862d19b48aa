// The smallest plait program: average a gradient-sized vector across the job.
//
//   build/tools/plait/plait run -n 4 -- build/examples/allreduce_example
//
// Works the same under torchrun, mpirun or srun (see the README for the store settings).
#include <plait/plait.h>

#include <cstdio>
#include <vector>

int main() {
  try {
    auto comm = plait::Communicator::create(plait::bootstrap_from_env(std::chrono::seconds(60)));
    std::vector<float> grad(1 << 20, static_cast<float>(comm->rank()));
    auto work = comm->allreduce(grad.data(), grad.data(), grad.size(), plait::DataType::kF32,
                                plait::ReduceOp::kAvg);
    // ... overlap compute here ...
    work->wait();  // throws plait::Error with rank, peer, op and cause on failure
    const float want = (comm->size() - 1) / 2.0f;
    if (grad.front() != want || grad.back() != want) {
      std::fprintf(stderr, "rank %d: got %g, want %g\n", comm->rank(), grad.front(), want);
      return 1;
    }
    std::printf("rank %d of %d: mean %g via %s\n", comm->rank(), comm->size(), grad.front(),
                work->algorithm().c_str());
    return 0;
  } catch (const plait::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
