#include "plait/tune/measure.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>

#include "core/clock.h"
#include "core/reduce.h"
#include "plait/error.h"

namespace plait::cli {
namespace {

// Tags of the tune protocol; any value below 2^31 that no one else uses on the communicator.
constexpr uint32_t kPingTag = 0x7e570001;
constexpr uint32_t kPongTag = 0x7e570002;
constexpr uint32_t kRepsTag = 0x7e570003;

// Page-aligned and touched, so that neither page faults nor a registration straddling a
// foreign page land inside the timed loop.
using Buffer = std::unique_ptr<char, decltype(&std::free)>;
Buffer allocate(size_t bytes) {
  const size_t rounded = std::max<size_t>(4096, (bytes + 4095) / 4096 * 4096);
  auto* p = static_cast<char*>(std::aligned_alloc(4096, rounded));
  if (p == nullptr) throw system_error("allocating " + std::to_string(bytes) + " bytes", ENOMEM);
  std::memset(p, 1, rounded);
  return Buffer(p, &std::free);
}

int reps_for(const PingPongPlan& plan, double seconds_per_rep) {
  const double wanted = plan.seconds_per_visit / std::max(seconds_per_rep, 1e-9);
  return static_cast<int>(std::clamp<double>(std::ceil(wanted), plan.min_reps, plan.max_reps));
}

// The sizes in the order both ranks visit them.
std::vector<size_t> visits(const PingPongPlan& plan) {
  std::vector<size_t> order;
  for (int pass = 0; pass < plan.passes; ++pass) {
    if (pass % 2 == 0)
      order.insert(order.end(), plan.sizes.begin(), plan.sizes.end());
    else
      order.insert(order.end(), plan.sizes.rbegin(), plan.sizes.rend());
  }
  return order;
}

// Median seconds of `run(i)` over repetitions until plan.seconds have passed (at least
// plan.min_reps of them).
double median_seconds(const HostPlan& plan, const std::function<void(int)>& run) {
  std::vector<double> times;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < plan.min_reps || seconds_since(start) < plan.seconds; ++i) {
    const Clock::time_point t0 = Clock::now();
    run(i);
    times.push_back(seconds_since(t0));
  }
  return transport::median(times);
}

}  // namespace

PingPongPlan ping_pong_plan(bool quick) {
  PingPongPlan plan;
  if (quick) {
    plan.sizes = {8, 4096, 256 * 1024};
    plan.passes = 1;
    plan.first_warmup = 3;
    plan.warmup = 1;
    plan.seconds_per_visit = 0.005;
    plan.max_reps = 50;
    return plan;
  }
  for (size_t n = 8; n <= (size_t{4} << 20); n *= 2) plan.sizes.push_back(n);
  return plan;
}

HostPlan host_plan(bool quick) {
  HostPlan plan;
  if (quick) {
    plan.bytes = size_t{1} << 20;
    plan.seconds = 0;
    plan.min_reps = 3;
  }
  return plan;
}

std::vector<transport::LatencySample> ping_pong(Communicator& comm, const PingPongPlan& plan) {
  std::vector<transport::LatencySample> samples;
  if (comm.rank() > 1 || plan.sizes.empty()) return samples;
  const size_t max_bytes = *std::max_element(plan.sizes.begin(), plan.sizes.end());
  // Separate buffers: the echo may land before the ping's send has completed locally.
  Buffer out = allocate(max_bytes), in = allocate(max_bytes);
  const DataType u8 = DataType::kU8;

  const std::vector<size_t> order = visits(plan);
  if (comm.rank() == 1) {
    bool first = true;
    for (size_t n : order) {
      auto echo = [&] {
        comm.recv(in.get(), n, u8, 0, kPingTag)->wait();
        comm.send(in.get(), n, u8, 0, kPongTag)->wait();
      };
      for (int i = 0; i < (first ? plan.first_warmup : 0) + plan.warmup; ++i) echo();
      first = false;
      int64_t reps = 0;
      comm.recv(&reps, 1, DataType::kI64, 0, kRepsTag)->wait();
      for (int64_t i = 0; i < reps; ++i) echo();
    }
    return samples;
  }

  bool first = true;
  for (size_t n : order) {
    // The receive is posted first, as a collective step posts its receives before its sends.
    auto round_trip = [&] {
      WorkPtr pong = comm.recv(in.get(), n, u8, 1, kPongTag);
      comm.send(out.get(), n, u8, 1, kPingTag)->wait();
      pong->wait();
    };
    for (int i = 0; i < (first ? plan.first_warmup : 0); ++i) round_trip();
    first = false;
    std::vector<double> warmup;
    for (int i = 0; i < plan.warmup; ++i) {
      const Clock::time_point t0 = Clock::now();
      round_trip();
      warmup.push_back(seconds_since(t0));
    }
    // The median: a visit's first round trip may pay one-time costs (a larger buffer, a
    // first rendezvous) that would shrink the timed loop for nothing. Rank 1 echoes as many
    // round trips as this rank decides, so it is told the count.
    int64_t reps = reps_for(plan, warmup.empty() ? 0 : transport::median(warmup));
    comm.send(&reps, 1, DataType::kI64, 1, kRepsTag)->wait();
    for (int64_t i = 0; i < reps; ++i) {
      const Clock::time_point t0 = Clock::now();
      round_trip();
      samples.push_back({n, seconds_since(t0) / 2});
    }
  }
  return samples;
}

HostRates measure_host(const HostPlan& plan) {
  // Four operand pairs in rotation: each repetition reads and writes memory that the previous
  // three pushed out of the (private) caches.
  constexpr int kPairs = 4;
  const size_t floats = plan.bytes / sizeof(float);
  std::vector<float> arena(2 * kPairs * floats, 1.0f);  // finite inputs: no NaN slow paths
  auto dst = [&](int i) { return arena.data() + (2 * (i % kPairs)) * floats; };
  auto src = [&](int i) { return arena.data() + (2 * (i % kPairs) + 1) * floats; };
  const double bytes = static_cast<double>(floats * sizeof(float));

  HostRates rates;
  const double reduce_s = median_seconds(plan, [&](int i) {
    reduce_inplace(DataType::kF32, ReduceOp::kSum, dst(i), src(i), floats);
  });
  rates.gamma_bytes_per_us = bytes / (reduce_s * 1e6);
  const double copy_s = median_seconds(plan, [&](int i) {
    std::memcpy(dst(i), src(i), floats * sizeof(float));
  });
  rates.copy_bytes_per_us = bytes / (copy_s * 1e6);
  // Reading the result keeps the copies observable, so none can be optimised away.
  volatile float sink = arena[floats / 2];
  (void)sink;
  return rates;
}

double segment_round_us(Communicator& comm, bool quick) {
  const CallOptions shm{.algorithm = "shm"};
  const int batches = quick ? 3 : 9, calls = quick ? 500 : 2000;
  for (int i = 0; i < 200; ++i) comm.barrier(shm)->wait();
  std::vector<double> per_call;
  for (int b = 0; b < batches; ++b) {
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < calls; ++i) comm.barrier(shm)->wait();
    per_call.push_back(seconds_since(t0) * 1e6 / calls);
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

}  // namespace plait::cli
