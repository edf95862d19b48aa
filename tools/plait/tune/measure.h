// What `plait tune` times: message round trips between two ranks of a communicator, and the
// host's reduction and copy bandwidths.
#pragma once

#include <cstddef>
#include <vector>

#include "plait/communicator.h"
#include "transport/cost_fit.h"

namespace plait::cli {

// The sizes are swept `passes` times, alternately up and down, each visit of a size taking
// a share of its time: load that comes and goes on a shared host then lands on every size a
// little instead of on a few sizes wholly, which would bend the fitted line.
struct PingPongPlan {
  std::vector<size_t> sizes;  // message sizes in bytes, ascending
  int passes = 4;
  int first_warmup = 50;      // untimed round trips before the first visit: connections settle
  int warmup = 3;             // untimed round trips per visit (they also size its timed loop)
  double seconds_per_visit = 0.0125;  // the timed loop's target length
  int min_reps = 3;           // per visit
  int max_reps = 500;
};

struct HostPlan {
  size_t bytes = size_t{8} << 20;  // one operand; several rotate so none stays in cache
  double seconds = 0.2;            // per measurement
  int min_reps = 5;
};

PingPongPlan ping_pong_plan(bool quick);
HostPlan host_plan(bool quick);

// Collective over the communicator's ranks 0 and 1 (any others return at once): rank 0
// sends each size to rank 1 and times the echo. Returns rank 0's one-way times (round trip
// / 2), one sample per timed round trip; empty on other ranks. Both ranks must pass the same
// plan. Throws what the communicator throws.
std::vector<transport::LatencySample> ping_pong(Communicator& comm, const PingPongPlan& plan);

struct HostRates {
  double gamma_bytes_per_us = 0;  // plait::reduce_inplace, f32 sum, per byte of one operand
  double copy_bytes_per_us = 0;   // memcpy
};

// Collective over every rank of `comm`: the median time of one barrier over the
// communicator's collective segment (the shm algorithm: one round of flags, no message),
// over `batches` batches of `calls` barriers, in microseconds. What a round of any shm
// collective costs beyond its data (CostModel::flag_us). Throws what the communicator throws
// (kInvalidUsage when it has no segment: ranks on several hosts, PLAIT_SHM_COLL=off).
double segment_round_us(Communicator& comm, bool quick);

// Medians over repetitions on operands that rotate through several times the plan's bytes,
// so that caches hold little of them: the conservative ("cold") end of both rates.
HostRates measure_host(const HostPlan& plan);

}  // namespace plait::cli
