// One training step as `plait sim train` replays it: each rank's thread runs a program in
// order (compute for a while, issue a call, wait for a call), and the calls are plait's
// collectives over groups of global ranks or point-to-point messages. Where a recording or a
// layout description becomes this is timeline_input.h and layout.h; the replay is
// train_replay.h.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "coll/schedule/schedule.h"

namespace plait::sim::train {

struct Call {
  std::string name;  // what the critical path calls it: "allreduce grads layer 3"
  // A collective over `members`, or a message from members[0] to members[1] (p2p).
  bool p2p = false;
  coll::CollOp op = coll::CollOp::kAllreduce;
  std::vector<int> members;  // global ranks, in group order
  // As plait bench counts them: the buffer (allreduce, broadcast, reduce), every rank's
  // blocks together (allgather, reduce_scatter, alltoall), the message (p2p).
  uint64_t bytes = 0;
  DataType dtype = DataType::kF32;
  // The schedule it runs; `chosen` false: the cost model picks, as a communicator on that
  // network would.
  coll::Algorithm algorithm = coll::Algorithm::kRing;
  bool chosen = false;
  int root = 0;  // a group rank
  // Calls of one group run one after another on each member, in the order it issues them
  // (a communicator's queue); -1: none (p2p messages).
  int group = -1;
  // A call of one member among that member's copies (StepGraph::copies): `copy_group` of
  // them, `copy_stride` apart (copies c, c + stride, ...; each such set one call). 0: all of
  // them, consecutive.
  int copy_group = 0;
  int copy_stride = 1;
};

enum class TaskKind : uint8_t {
  kCompute,  // `seconds` on the rank's compute stream
  kIssue,    // hands `call` over; the thread goes on
  kWait,     // blocks until `call` is done on this rank
};

struct Task {
  TaskKind kind = TaskKind::kCompute;
  uint32_t label = 0;  // kCompute: StepGraph::labels[label]
  int32_t call = -1;
  double seconds = 0;
};

struct StepGraph {
  int ranks = 0;
  std::vector<Call> calls;
  std::vector<std::vector<Task>> programs;  // by global rank
  std::vector<std::string> labels;          // what compute tasks are ("F mb 3")
  // By rank: when its program starts (empty: every rank at 0). A recorded step keeps its
  // ranks' skew: a rank that ended the step before late waits for the others in this one.
  std::vector<double> starts;
  // Each rank stands for `copies` ranks that run its program alike (the ranks of a tensor-
  // parallel group): rank r is rank r * copies of the job, its copies the next copies - 1.
  // A call of one member is a call among that member's copies (Call::copy_group): within
  // one host, its time alone there; across hosts (the data-parallel allreduce of a step
  // replayed through one pipeline), the schedule of its first copy, whose messages stand for
  // every copy's as the call's symmetry (a shift or an exclusive or) maps them. A call of
  // several members stands for `copies` calls alike, copy t among the members' t-th copies.
  // Each message stands for its copies' messages on their own paths. 1: every rank is itself.
  int copies = 1;

  // Appends to `rank`'s program.
  void compute(int rank, const std::string& label, double seconds);
  void issue(int rank, int call);
  void wait(int rank, int call);
  int add_call(Call call);

 private:
  std::unordered_map<std::string, uint32_t> label_ids_;
};

// Ops whose bytes are every member's blocks together (allgather, reduce_scatter, alltoall,
// gather, scatter): their bytes divide by the member count.
bool bytes_are_blocks(coll::CollOp op);

// Throws kInvalidUsage naming the rank and call where: a program issues a call it is not a
// member of, issues it twice or not at all, waits for one before issuing it, a member never
// issues a call, a p2p call has other than two distinct members, a rank is out of range, a
// duration is negative, or a call's bytes do not divide among its members as its op needs.
void check(const StepGraph& graph);

}  // namespace plait::sim::train
