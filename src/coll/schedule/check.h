// A checker for schedules, and the seed of the simulator: given one schedule per rank,
// built for the same call, it
//   (a) validates them: the matching contract of schedule.h (per ordered pair, as many
//       sends as receives, pairwise of equal element counts), peers and dependencies in
//       range, every slice inside its buffer (kInput within the input, kOutput within the
//       op's output, kScratch within scratch_count), no writes to the input of an
//       out-of-place call, equal counts on both sides of copy/reduce/recv_reduce;
//   (b) finds data races statically: two steps of one rank that no chain of dependencies
//       orders must not touch overlapping elements of one buffer unless both only read.
//       In place, kInput is resolved onto kOutput at the op's offset (layout_of). A send
//       reads its source; a recv writes its destination; a recv_reduce writes its staging
//       and reads+writes its accumulator; copy reads src and writes dst; reduce reads src
//       and reads+writes dst;
//   (c) executes all ranks together on real buffers, picking among runnable steps in a
//       seeded random order. A send and its receive complete together, once both have
//       been posted (rendezvous: no send completes into a buffer nobody posted, so a
//       schedule that only works with eager buffering deadlocks here). When nothing can
//       run but steps remain, it reports a deadlock naming the ranks and stuck steps.
// It never throws for a bad schedule and never asserts: problems come back as a result
// with an error string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "coll/schedule/schedule.h"

namespace plait::coll {

struct CheckOptions {
  bool check_races = true;
  bool execute = true;
  uint64_t seed = 1;             // order in which runnable steps are picked
  size_t max_listed_steps = 6;   // per rank, in a deadlock report
};

struct CheckResult {
  bool ok = true;
  std::string error;     // the first problem found; empty when ok
  size_t steps = 0;      // over all ranks
  size_t executed = 0;   // steps run before success or the first problem
  explicit operator bool() const { return ok; }
};

// One rank's memory. Sizes are in bytes and must hold layout_of(args) in the call's dtype.
// In place, `output` is the one buffer (layout_of(args).buffer_count() elements) and
// `input` is ignored. Scratch is allocated by the checker and filled with garbage.
struct RankBuffers {
  std::span<std::byte> output;
  std::span<std::byte> input;
};

// (a) and, with check_races, (b). args[r] and schedules[r] belong to rank r.
CheckResult validate_schedules(std::span<const CollArgs> args,
                               std::span<const Schedule> schedules, bool check_races = true);

// (a), (b) unless disabled, then (c) unless disabled.
CheckResult check_schedules(std::span<const CollArgs> args, std::span<const Schedule> schedules,
                            std::span<const RankBuffers> buffers,
                            const CheckOptions& options = {});

// "send to 3 in[0,+8)": one step, for messages.
std::string describe_step(const Schedule& schedule, StepId id);

}  // namespace plait::coll
