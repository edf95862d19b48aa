// oneCCL's ccl::allreduce (float32 SUM, host buffers) measured as ../shared/peers measures
// MPI_Allreduce (allreduce_bench.c), so that it becomes one more column of
// bench/compare_peers.sh: warm-up, calibration, a timed loop of back-to-back out-of-place
// calls, the slowest rank's mean time per call, busbw = algbw * 2(p-1)/p, and the result of
// the last call checked (every element must equal sum_r (r+1) = p(p+1)/2, exact in float32).
//
//   oneccl_allreduce --rank R --size P --kvs-file F [--target-sec S] [--label L] [bytes ...]
//
// Started P times by bench/oneccl/run.sh. Rank and size come from the flags or, when the
// ranks are started by Intel MPI's mpiexec (needed by CCL_ATL_TRANSPORT=mpi), from PMI_RANK
// and PMI_SIZE. Rank 0 creates the main KVS and publishes its address in F; the others
// read it from there: a file is enough for ranks of one host and needs no MPI.
//
// Rank 0 prints, per size, the `RESULT label=... max_us=... busbw_GBps=... check=ok|FAIL`
// line that bench/summarize_peers.py reads.
#include <oneapi/ccl.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  int rank = -1;
  int size = -1;
  std::string kvs_file;
  double target_sec = 0.3;
  std::string label = "oneccl";
  std::vector<size_t> sizes;
};

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : -1;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    bool has_value = i + 1 < argc;
    if (a == "--rank" && has_value) {
      o.rank = std::atoi(argv[++i]);
    } else if (a == "--size" && has_value) {
      o.size = std::atoi(argv[++i]);
    } else if (a == "--kvs-file" && has_value) {
      o.kvs_file = argv[++i];
    } else if (a == "--target-sec" && has_value) {
      o.target_sec = std::atof(argv[++i]);
    } else if (a == "--label" && has_value) {
      o.label = argv[++i];
    } else {
      o.sizes.push_back(std::strtoull(a.c_str(), nullptr, 10));
    }
  }
  if (o.rank < 0) o.rank = env_int("PMI_RANK");
  if (o.size < 0) o.size = env_int("PMI_SIZE");
  if (o.rank < 0 || o.size < 1 || o.rank >= o.size || o.kvs_file.empty())
    throw std::invalid_argument(
        "usage: oneccl_allreduce --rank R --size P --kvs-file F [--target-sec S] "
        "[--label L] [bytes ...] (R and P may come from PMI_RANK and PMI_SIZE)");
  if (o.sizes.empty()) o.sizes = {8, 1024, 65536, 1048576, 16777216, 67108864};
  return o;
}

// Written to a temporary name and renamed, so a reader sees all of the address or nothing.
void publish_address(const std::string& path, const ccl::kvs::address_type& addr) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(addr.data(), addr.size());
    if (!f) throw std::runtime_error("rank 0: cannot write the KVS address to " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("rank 0: cannot rename " + tmp + " to " + path + ": " +
                             std::strerror(errno));
}

// Rank 0 may still be initializing: wait for its file, but not forever (the launcher's
// `timeout` is the last resort, this message says what was missing).
ccl::kvs::address_type read_address(const std::string& path, int rank) {
  ccl::kvs::address_type addr{};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    std::ifstream f(path, std::ios::binary);
    if (f && f.read(addr.data(), addr.size())) return addr;
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("rank " + std::to_string(rank) + ": no KVS address in " + path +
                               " after 60 s (did rank 0 start?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

double now_sec() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

template <class T>
T allreduce_one(T value, ccl::reduction op, const ccl::communicator& comm) {
  T out{};
  ccl::allreduce(&value, &out, 1, op, comm).wait();
  return out;
}

void run(const Options& o) {
  ccl::init();
  std::shared_ptr<ccl::kvs> kvs;
  if (o.rank == 0) {
    kvs = ccl::create_main_kvs();
    publish_address(o.kvs_file, kvs->get_address());
  } else {
    kvs = ccl::create_kvs(read_address(o.kvs_file, o.rank));
  }
  auto comm = ccl::create_communicator(o.size, o.rank, kvs);
  const int np = comm.size();

  size_t maxbytes = *std::max_element(o.sizes.begin(), o.sizes.end());
  size_t maxcount = std::max<size_t>(maxbytes / sizeof(float), 1);
  // Page-aligned like allreduce_bench.c's buffers; first touched here, before any timing.
  std::vector<float> send(maxcount + 1024), recv(maxcount + 1024);
  auto align = [](float* p) {
    auto a = reinterpret_cast<uintptr_t>(p);
    return reinterpret_cast<float*>((a + 4095) & ~uintptr_t{4095});
  };
  float* sbuf = align(send.data());
  float* rbuf = align(recv.data());
  std::fill(sbuf, sbuf + maxcount, static_cast<float>(o.rank + 1));
  const float expect = static_cast<float>(np) * static_cast<float>(np + 1) / 2.0f;

  if (o.rank == 0) {
    auto v = ccl::get_library_version();
    std::printf("# %s | np=%d | target_sec=%.2f | lib: oneCCL %s\n", o.label.c_str(), np,
                o.target_sec, v.full);
    std::printf("# %-10s %8s %12s %12s %10s %10s %6s\n", "bytes", "iters", "avg_us",
                "max_us", "algbw_GB/s", "busbw_GB/s", "check");
    std::fflush(stdout);
  }

  for (size_t requested : o.sizes) {
    size_t count = std::max<size_t>(requested / sizeof(float), 1);
    size_t bytes = count * sizeof(float);
    auto call = [&] {
      ccl::allreduce(sbuf, rbuf, count, ccl::reduction::sum, comm).wait();
    };

    // Warm-up: absorbs connection setup and first-touch page faults; not timed.
    int warm = bytes >= (8u << 20) ? 2 : (bytes >= (1u << 20) ? 5 : 50);
    ccl::barrier(comm).wait();
    for (int i = 0; i < warm; i++) call();
    // Calibration: as many again, timed. Every rank gets the same slowest time from the
    // MAX allreduce and so computes the same iteration count: no broadcast needed.
    ccl::barrier(comm).wait();
    double t0 = now_sec();
    for (int i = 0; i < warm; i++) call();
    double tw = allreduce_one((now_sec() - t0) / warm, ccl::reduction::max, comm);
    int min_iters = bytes >= (8u << 20) ? 5 : 20;
    long iters = static_cast<long>(o.target_sec / std::max(tw, 1e-9));
    iters = std::clamp<long>(iters, min_iters, 1000000);

    ccl::barrier(comm).wait();
    t0 = now_sec();
    for (long i = 0; i < iters; i++) call();
    double t = (now_sec() - t0) / iters;

    int ok = std::all_of(rbuf, rbuf + count, [&](float x) { return x == expect; }) ? 1 : 0;
    double tmax = allreduce_one(t, ccl::reduction::max, comm);
    double tsum = allreduce_one(t, ccl::reduction::sum, comm);
    int allok = allreduce_one(ok, ccl::reduction::min, comm);
    if (o.rank == 0) {
      double algbw = static_cast<double>(bytes) / tmax / 1e9;
      double busbw = algbw * 2.0 * (np - 1) / np;
      const char* check = allok ? "ok" : "FAIL";
      std::printf("  %-10zu %8ld %12.2f %12.2f %10.3f %10.3f %6s\n", bytes, iters,
                  tsum / np * 1e6, tmax * 1e6, algbw, busbw, check);
      std::printf("RESULT label=%s np=%d bytes=%zu iters=%ld avg_us=%.3f max_us=%.3f "
                  "algbw_GBps=%.4f busbw_GBps=%.4f check=%s\n",
                  o.label.c_str(), np, bytes, iters, tsum / np * 1e6, tmax * 1e6, algbw, busbw,
                  check);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oneccl_allreduce: %s\n", e.what());
    return 1;
  }
  return 0;
}
