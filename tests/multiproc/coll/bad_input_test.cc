// Bad input from the caller: null buffers, counts whose byte size overflows, dtypes and
// reduce ops outside their enums, roots and peers out of range, per-rank count lists of the
// wrong length. Each is refused at the call with `invalid usage` naming the operation, on the
// rank that made it, and the communicator goes on working (checked after every case).
// Misaligned buffers are not an error: they reduce correctly. A communicator that was
// aborted fails every later call with `aborted`, and a Work outlives its communicator.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "plait/plait.h"
#include "support/job.h"

namespace plait::testing {
namespace {

struct Case {
  const char* name;
  const char* expect;  // text the error must contain
  std::function<void(Communicator&)> call;
};

// A checked allreduce: the communicator still works.
bool still_works(Communicator& comm) {
  std::vector<int32_t> v(1000, comm.rank() + 1);
  comm.allreduce(v.data(), v.data(), v.size(), DataType::kI32, ReduceOp::kSum)->wait();
  const int n = comm.size();
  return v[0] == n * (n + 1) / 2 && v.back() == v[0];
}

int bad_input_child() {
  auto comm = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
  std::vector<float> buf(64, 1.0f);
  float* p = buf.data();
  const size_t huge = SIZE_MAX / 2;
  const std::vector<Case> cases = {
      // (A null send buffer means "in place", as MPI_IN_PLACE.)
      {"null recv", "recv buffer is null",
       [&](Communicator& c) { c.allreduce(p, nullptr, 8, DataType::kF32, ReduceOp::kSum); }},
      {"null recv of an allgather", "recv buffer is null",
       [&](Communicator& c) { c.allgather(p, nullptr, 8, DataType::kF32); }},
      {"overflowing count", "byte size overflows",
       [&](Communicator& c) { c.allreduce(p, p, huge, DataType::kF32, ReduceOp::kSum); }},
      {"overflowing count times ranks", "byte size overflows",
       [&](Communicator& c) { c.allgather(p, p, SIZE_MAX / 4, DataType::kF64); }},
      {"unknown dtype", "unknown dtype 99",
       [&](Communicator& c) {
         c.allreduce(p, p, 8, static_cast<DataType>(99), ReduceOp::kSum);
       }},
      {"unknown reduce op", "unknown reduce op 17",
       [&](Communicator& c) {
         c.allreduce(p, p, 8, DataType::kF32, static_cast<ReduceOp>(17));
       }},
      {"unknown dtype in send", "unknown dtype 200",
       [&](Communicator& c) { c.send(p, 8, static_cast<DataType>(200), 1 - c.rank(), 0); }},
      {"root out of range", "root 7 out of range",
       [&](Communicator& c) { c.broadcast(p, p, 8, DataType::kF32, 7); }},
      {"negative root", "root -1 out of range",
       [&](Communicator& c) { c.reduce(p, p, 8, DataType::kF32, ReduceOp::kSum, -1); }},
      {"peer out of range", "peer 5 out of range",
       [&](Communicator& c) { c.recv(p, 8, DataType::kF32, 5, 0); }},
      {"tag too large", "tag must be below 2^31",
       [&](Communicator& c) { c.send(p, 8, DataType::kF32, 1 - c.rank(), 1u << 31); }},
      {"count list of the wrong length", "counts",
       [&](Communicator& c) {
         c.allgatherv(p, p, std::vector<size_t>{1, 2, 3}, DataType::kF32);
       }},
  };
  int failures = 0;
  for (const Case& k : cases) {
    try {
      k.call(*comm);
      std::printf("FAIL %s: no error\n", k.name);
      ++failures;
    } catch (const Error& e) {
      const std::string what = e.what();
      if (e.category() != ErrorCategory::kInvalidUsage || what.find(k.expect) == std::string::npos) {
        std::printf("FAIL %s: %s\n", k.name, what.c_str());
        ++failures;
      }
    }
    if (!still_works(*comm)) {
      std::printf("FAIL %s: the communicator broke\n", k.name);
      ++failures;
    }
  }
  // Misaligned (by one byte) is no error: the result is right.
  std::vector<char> raw(4 * 1001 + 1);
  auto* odd = reinterpret_cast<float*>(raw.data() + 1);
  for (int i = 0; i < 1000; ++i) {
    const float v = static_cast<float>(comm->rank() + i);
    std::memcpy(reinterpret_cast<char*>(odd) + 4 * i, &v, 4);
  }
  comm->allreduce(odd, odd, 1000, DataType::kF32, ReduceOp::kSum)->wait();
  for (int i = 0; i < 1000; ++i) {
    float v;
    std::memcpy(&v, reinterpret_cast<char*>(odd) + 4 * i, 4);
    if (v != static_cast<float>(2 * i + 1)) {
      std::printf("FAIL misaligned: element %d is %g\n", i, v);
      ++failures;
      break;
    }
  }
  // A Work outlives its communicator.
  {
    std::vector<float> v(4096, 1.0f);
    WorkPtr w = comm->allreduce(v.data(), v.data(), v.size(), DataType::kF32, ReduceOp::kSum);
    w->wait();
    auto other = comm->split(0, comm->rank());
    WorkPtr later = other->barrier();
    other.reset();
    try {
      later->wait();
    } catch (const Error&) {
      // Finished or failed, both are fine: what matters is no crash and no hang.
    }
  }
  // After an abort, every call fails with `aborted`, at once. (On a communicator of its own:
  // each rank's abort reaches the other, which must not be in a call of this test then.)
  auto victim = comm->split(0, comm->rank());
  victim->abort("test abort");
  try {
    victim->allreduce(p, p, 8, DataType::kF32, ReduceOp::kSum)->wait();
    std::printf("FAIL aborted: no error\n");
    ++failures;
  } catch (const Error& e) {
    if (e.category() != ErrorCategory::kAborted) {
      std::printf("FAIL aborted: %s\n", e.what());
      ++failures;
    }
  }
  std::printf("%s\n", failures == 0 ? "all refused" : "some accepted");
  return failures == 0 ? 0 : 1;
}
ChildMode bad_input("bad_input", bad_input_child);

TEST(BadInput, IsRefusedAtTheCallAndTheCommunicatorGoesOn) {
  for (const char* transport : {"shm", "tcp"}) {
    auto results = spawn_ranks(2, {0, 1}, "bad_input", [&](int) {
      return std::map<std::string, std::string>{{"PLAIT_TRANSPORT", transport},
                                                {"PLAIT_TIMEOUT", "30000"}};
    });
    for (const auto& r : results) {
      EXPECT_EQ(r.status, 0) << transport << " rank " << r.rank << ": " << r.output;
      EXPECT_NE(r.output.find("all refused"), std::string::npos) << r.output;
    }
  }
}

}  // namespace
}  // namespace plait::testing
