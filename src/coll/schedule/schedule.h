// A collective algorithm is a schedule, and a schedule is data (DESIGN.md, "the one idea").
// A builder turns the shape of one call (CollArgs) into this rank's list of steps; the
// executor runs any schedule on any fabric, the simulator replays the same schedule on a
// model. Builders never touch memory or the network.
//
// Buffers are named, not pointed to: kInput is the caller's send buffer, kOutput the receive
// buffer, kScratch a temporary the executor allocates (scratch_count elements). Offsets and
// counts are in elements of the call's dtype. In-place calls alias kInput onto kOutput (see
// CollArgs::in_place); builders handle both cases through the slices they emit.
//
// Matching contract: for every ordered pair of ranks (a, b), the kSend steps to b in a's
// schedule, taken in step order, pair one-to-one with the kRecv / kRecvReduce steps from a in
// b's schedule, also in step order, and each pair moves the same number of elements. The
// executor derives message tags from that order, so steps may *run* in any order their
// dependencies allow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "plait/types.h"

namespace plait::coll {

enum class CollOp : uint8_t {
  kAllreduce,
  kReduce,
  kBroadcast,
  kAllgather,
  kAllgatherv,
  kReduceScatter,
  kReduceScatterv,
  kAlltoall,
  kAlltoallv,
  kGather,
  kScatter,
  kBarrier,
};
// "allreduce", "reduce_scatter", ...; inline: every call's Work is labelled with it.
inline std::string_view to_string(CollOp op) {
  static constexpr std::string_view kNames[] = {
      "allreduce", "reduce", "broadcast", "allgather", "allgatherv", "reduce_scatter",
      "reduce_scatterv", "alltoall", "alltoallv", "gather", "scatter", "barrier"};
  static_assert(std::size(kNames) == static_cast<size_t>(CollOp::kBarrier) + 1);
  const auto i = static_cast<size_t>(op);
  return i < std::size(kNames) ? kNames[i] : "?";
}

enum class Algorithm : uint8_t {
  kAuto,
  kNaive,               // everyone talks to everyone directly
  kPs,                  // parameter-server style: reduce shards to k roots, then broadcast
  kRing,                // ring (reduce-scatter + allgather for allreduce; chain for broadcast)
  kHalvingDoubling,     // recursive halving reduce-scatter + recursive doubling allgather
  kRecursiveDoubling,   // full-size exchanges in log2(n) rounds (latency-optimal)
  kBinomialTree,        // binomial tree (reduce / broadcast / gather / scatter)
  kDoubleBinaryTree,    // two complementary binary trees, half the vector each (NCCL 2.4)
  kHierarchical,        // two levels: within each host, then across hosts (CollArgs::host_of)
  kShm,                 // no messages: loads and stores in the communicator's collective
                        // segment (coll/segment); not a schedule, so it has no builder
};
std::string_view to_string(Algorithm algo);  // "naive", "ps", "ring", "halving_doubling", ...
bool parse_algorithm(std::string_view name, Algorithm* out);

enum class BufferId : uint8_t { kInput, kOutput, kScratch };

struct Slice {
  BufferId buffer = BufferId::kOutput;
  size_t offset = 0;  // elements
  size_t count = 0;   // elements
};

enum class StepKind : uint8_t {
  kSend,        // send src to peer
  kRecv,        // receive from peer into dst
  kRecvReduce,  // receive from peer into src (a staging slice), then dst = dst (op) src
  kCopy,        // dst = src (same count)
  kReduce,      // dst = dst (op) src (same count), local
};
std::string_view to_string(StepKind kind);

struct Step {
  StepKind kind = StepKind::kCopy;
  int peer = -1;
  Slice src;
  Slice dst;
  uint32_t dep_begin = 0;  // this step's dependencies: deps[dep_begin, dep_begin + dep_count)
  uint32_t dep_count = 0;
};

using StepId = uint32_t;

class Schedule {
 public:
  std::vector<Step> steps;
  std::vector<StepId> deps;  // pool referenced by Step::dep_begin/dep_count
  size_t scratch_count = 0;  // elements of kScratch the executor must provide
  std::string algorithm;     // which builder made it, for logs and bench

  // Each returns the new step's id. Dependencies must be ids of earlier steps.
  StepId send(int peer, Slice src, std::span<const StepId> after = {});
  StepId recv(int peer, Slice dst, std::span<const StepId> after = {});
  StepId recv_reduce(int peer, Slice staging, Slice accum, std::span<const StepId> after = {});
  StepId copy(Slice src, Slice dst, std::span<const StepId> after = {});
  StepId reduce(Slice src, Slice dst, std::span<const StepId> after = {});
  StepId send(int peer, Slice src, std::initializer_list<StepId> after) {
    return send(peer, src, std::span<const StepId>(after.begin(), after.size()));
  }
  StepId recv(int peer, Slice dst, std::initializer_list<StepId> after) {
    return recv(peer, dst, std::span<const StepId>(after.begin(), after.size()));
  }
  StepId recv_reduce(int peer, Slice staging, Slice accum, std::initializer_list<StepId> after) {
    return recv_reduce(peer, staging, accum, std::span<const StepId>(after.begin(), after.size()));
  }
  StepId copy(Slice src, Slice dst, std::initializer_list<StepId> after) {
    return copy(src, dst, std::span<const StepId>(after.begin(), after.size()));
  }
  StepId reduce(Slice src, Slice dst, std::initializer_list<StepId> after) {
    return reduce(src, dst, std::span<const StepId>(after.begin(), after.size()));
  }

  // Reserves `count` elements of scratch and returns their offset.
  size_t alloc_scratch(size_t count);

  std::span<const StepId> deps_of(const Step& step) const {
    return {deps.data() + step.dep_begin, step.dep_count};
  }

 private:
  StepId add(Step step, std::span<const StepId> after);
};

// The shape of one collective call on one rank: everything a builder needs.
//
// Buffer layouts (elements), per op:
//   allreduce       in[count] -> out[count]
//   reduce          in[count] -> out[count] on root (every rank gets an out[count]; the
//                   communicator supplies a temporary where the caller gave none)
//   broadcast       root's in[count] -> out[count] on every rank
//   allgather       in[count] -> out[size*count], rank r's block at r*count
//   allgatherv      in[counts[rank]] -> out[sum(counts)], rank r's block at displs[r]
//   reduce_scatter  in[size*count] -> out[count] = reduction of block `rank`
//   reduce_scatterv in[sum(counts)] (block r at displs[r]) -> out[counts[rank]]
//   alltoall        in[size*count] (block p goes to p) -> out[size*count] (block p from p)
//   alltoallv       in: send_counts[p] at send_displs[p] -> out: counts[p] at displs[p]
//   gather          in[count] -> out[size*count] on root (r's block at r*count)
//   scatter         root's in[size*count] -> out[count]
//   barrier         no data
// in_place: kInput and kOutput are one buffer. For allgather(v) in-place, this rank's block
// already sits in out at its offset and `in` is that block; for reduce_scatter(v) in-place
// the result is expected at out[0, counts[rank]) of the same buffer, like MPI.
struct CollArgs {
  CollOp op = CollOp::kAllreduce;
  int rank = 0;
  int size = 1;
  DataType dtype = DataType::kF32;
  ReduceOp redop = ReduceOp::kSum;
  int root = 0;
  size_t count = 0;
  std::vector<size_t> counts;       // v-variants (size entries)
  std::vector<size_t> displs;       // v-variants (size entries)
  std::vector<size_t> send_counts;  // alltoallv
  std::vector<size_t> send_displs;  // alltoallv
  bool in_place = false;
  size_t chunk_count = 0;  // pipelining unit in elements; 0 = do not split transfers
  int ps_roots = 0;        // k for Algorithm::kPs; 0 = min(size, 4)
  // Host index of every communicator rank (size entries, any non-negative values; equal
  // values = same host), or empty: all ranks on one host. Every rank passes the same
  // vector. Algorithm::kHierarchical builds its two levels from it, and the cost model
  // charges every other algorithm the inter-host link when it names two or more hosts
  // (CostParams::inter_*). Ranks of one host need not be contiguous.
  std::vector<int> host_of;
  // Nonzero: the communicator has a collective segment over all its ranks, with slots of
  // this many bytes (Algorithm::kShm applies, and is costed by its rounds).
  uint64_t segment_slot_bytes = 0;
  // Ranks on several hosts, and every host of two or more ranks has a collective segment
  // over them: the hierarchical allreduce may run its intra-host stages there.
  bool host_segments = false;
  // The hierarchical allreduce runs them there (the selection decides, alike on every rank):
  // a reduce to each host's first rank on its segment, an allreduce among those first ranks
  // (the schedule), and a broadcast on the segment. Else they are ring phases over messages.
  bool intra_on_segment = false;
};

}  // namespace plait::coll
