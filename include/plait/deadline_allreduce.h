// Allreduce with a deadline: a step does not wait for ranks that are late.
//
//   plait::deadline::Options opts{.deadline = std::chrono::milliseconds(20)};
//   plait::deadline::DeadlineAllreduce dl(*comm, opts);   // collective
//   auto step = dl.allreduce(grad, n, DataType::kF32, ReduceOp::kAvg);
//   // grad: the mean over step.contributors, the same bytes on every rank
//
// One rank, the aggregator (`root`), collects the contributions of each step on a thread of
// its own. The clock starts at the step's first arrival, or at the previous step's result
// with kStepStart. At the deadline, or as soon as every rank (or size - backup ranks) has
// arrived, it reduces what it has and sends the result to every rank, with the set it
// reduced. So every rank gets the same values and the same contributor set. A contribution
// that comes later is dropped at the aggregator. With LatePolicy::kCarry, the late rank adds
// it to its next contribution: nothing is lost, it arrives one step late (error feedback).
//
// The aggregator thread takes part in no step's compute. A rank slow to compute its
// gradient (even the aggregator's own process) does not hold it up. A rank that misses
// `report_after` deadlines in a row is logged, and every rank sees it in StepResult::slow.
//
// Collective rules as for any collective: every rank calls allreduce() once per step, in the
// same order, with the same count, dtype and op; a difference fails the step on every rank,
// naming the rank. Dead peers and the communicator's timeout end a step with an error, never
// a hang: a step also waits past its deadline until `min_contributors` have arrived, at most
// the communicator's timeout.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "plait/communicator.h"

namespace plait::deadline {

enum class LatePolicy : uint8_t {
  kDrop,   // a late contribution is lost
  kCarry,  // the late rank adds it to its next contribution (error feedback)
};

enum class DeadlineFrom : uint8_t {
  kFirstArrival,  // the step's deadline is `deadline` after its first contribution arrives
  kStepStart,     // ... after the previous step's result went out (a time budget per step)
};

struct Options {
  std::chrono::microseconds deadline{0};  // more than 0
  DeadlineFrom from = DeadlineFrom::kFirstArrival;
  LatePolicy late = LatePolicy::kDrop;
  // A step waits past its deadline until this many contributions have arrived (1..size).
  int min_contributors = 1;
  // Backup workers: a step ends as soon as size - backup contributions have arrived, even
  // before its deadline (0..size-1; 0: only the deadline or everyone ends a step early).
  int backup = 0;
  // Consecutive missed steps after which a rank is reported (logged and in StepResult::slow).
  int report_after = 3;
  int root = 0;  // the aggregating rank
  // Semi-reliable: each rank's values move in chunks of about this many bytes (0: one
  // message). At the deadline a chunk that has not arrived counts as missing for that chunk
  // only: each chunk is reduced over the ranks whose chunk arrived (for avg, their mean: the
  // chunk is rescaled; for sum the missing values count as zero). At most 4095 chunks.
  size_t chunk_bytes = 0;
  // The largest share of the step's values (of the ranks expected to contribute) that may go
  // missing; above it the step waits past its deadline for more (correctness over speed),
  // at most the communicator's timeout. 1: no bound.
  double max_dropped = 1.0;
};

struct StepResult {
  uint64_t step = 0;
  std::vector<int> contributors;  // ranks whose values are in the result, ascending
  bool contributed = false;       // this rank is one of them
  // This rank came after the step was decided (with values or only joining): it is behind
  // the others, and a rank that wants to catch up joins the next step without values.
  bool late = false;
  std::vector<int> slow;          // ranks that missed at least report_after steps in a row
  // The share of the values this step went without, of the ranks expected to contribute:
  // late ranks' and, with chunks, the chunks still on the way (with kCarry they come with
  // the rank's next step instead). Ranks that joined without values are not counted: they
  // skipped their compute, nothing of theirs was dropped.
  double dropped_fraction = 0;
  std::vector<int> chunk_contributors;  // per chunk, how many ranks' values it holds
  double wait_seconds = 0;  // from this rank's call until the result was here
};

class DeadlineAllreduce {
 public:
  // Collective over `comm`: every rank constructs one with the same options. It splits two
  // communicators off `comm` (contributions and results) and starts the aggregator thread on
  // the root. Throws Error(kInvalidUsage) for options out of range.
  DeadlineAllreduce(Communicator& comm, const Options& options);
  // Waits, up to 10 s (or the timeout if shorter), until late contributions are received
  // and every result delivered; past that it logs what is still missing.
  ~DeadlineAllreduce();
  DeadlineAllreduce(const DeadlineAllreduce&) = delete;
  DeadlineAllreduce& operator=(const DeadlineAllreduce&) = delete;

  // In place: on return data[0..count) holds the reduction over the step's contributors (for
  // kAvg their mean), identical on every rank. Blocks until the result is here. `key` names
  // the tensor for kCarry (a late contribution is added to the next call with the same key:
  // a DDP hook passes its bucket's index).
  // `contribute` false: this rank joins the step without values (a rank that fell behind
  // skips a step's compute to catch up); it is not a contributor, the mean is over the
  // others, and with kCarry a carried value for `key` still goes.
  StepResult allreduce(void* data, size_t count, DataType dtype, ReduceOp op, uint64_t key = 0,
                       bool contribute = true);

  int rank() const;
  int size() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace plait::deadline
