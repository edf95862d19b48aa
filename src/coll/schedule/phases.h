// The phases algorithms are composed of: ring reduce-scatter and allgather, binomial reduce,
// broadcast, gather and scatter, recursive halving and doubling, the fold that brings a
// non-power-of-two group down to a power of two, and an in-order reduction at one rank.
// Each emits steps into a ScheduleBuilder for one rank; the builder derives dependencies,
// so phases compose (a broadcast that follows a reduce starts on chunk 0 as soon as chunk 0
// is reduced) without any phase knowing about the other.
//
// Phases address peers by position in a Group: a ring order, a tree rooted at position 0,
// a hypercube. Groups map positions to ranks (rotated so the root is position 0, or folded).
//
// One file per family: ring_phases.cc, tree_phases.cc, hypercube_phases.cc; groups, the
// allreduce among a group and the in-order reduction in phases.cc.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "coll/schedule/builder.h"

namespace plait::coll {

struct Group {
  std::vector<int> ranks;  // position -> rank
  int pos = -1;            // this rank's position, -1 when it is not a member
  int n() const { return static_cast<int>(ranks.size()); }
  int rank(int p) const { return ranks[static_cast<size_t>(p)]; }
};

// All ranks, position p = (rank - root) mod size: the root is position 0.
Group rotated_group(int size, int rank, int root);

// Brings a group of n positions to p2 = floor_pow2(n): of the first 2*rem positions
// (rem = n - p2) each odd one gives its data to the even one below and sits out; the rest
// form `inner`, a group of p2 positions (the usual MPICH pre/post step).
struct Fold {
  int p2 = 1;
  int rem = 0;
  bool sits_out = false;  // an odd position < 2*rem
  bool absorbs = false;   // an even position < 2*rem
  int partner = -1;       // the rank paired with this one in the fold, when either is set
  Group inner;
};
Fold fold_to_pow2(const Group& g);

// Binomial tree over positions [0, n) rooted at 0: the node at `pos` covers [pos, end).
struct TreeNode {
  int parent = -1;            // position, -1 at the root
  std::vector<int> children;  // positions, smallest subtree first
  int end = 0;
};
TreeNode binomial_node(int n, int pos);

// ---- ring phases (positions in ring order; n blocks, one per position) ----

struct RingReduceScatter {
  int final_block = 0;                         // the block this position owns at the end
  std::function<Slice(int block)> own;         // this rank's contribution to a block
  std::function<Slice(int block, int step)> acc;  // where the block received at `step` sums up
  bool acc_holds_own = false;  // acc already contains own: fused recv_reduce through staging
};
void ring_reduce_scatter(ScheduleBuilder& b, const Group& g, const RingReduceScatter& spec);

struct RingAllgather {
  int first_block = 0;                   // the block this position holds at the start
  std::function<Slice(int block)> dst;   // where each block lands
  // Where this rank already has a block before the phase (sends read it there instead of
  // waiting for it to arrive), or nullopt.
  std::function<std::optional<Slice>(int block)> held;
};
void ring_allgather(ScheduleBuilder& b, const Group& g, const RingAllgather& spec);

// ---- tree phases (position 0 is the root) ----

// Reduces every rank's `own` into `acc` at the root; non-roots use `acc` for partial sums.
void binomial_reduce(ScheduleBuilder& b, const Group& g, Slice own, Slice acc);
// The root's `src` reaches `dst` on every rank.
void binomial_bcast(ScheduleBuilder& b, const Group& g, Slice src, Slice dst);

// A tree node's vector down to its children, one after another where it goes in one piece
// and ScheduleBuilder::acknowledged says a token is worth it (in_turn_down): every child but
// the last acknowledges its message with a zero-byte token and the next send waits for that.
// Posted together, a node's messages shared its link in TCP and reached all its children
// late, where one after another the first child has it after one message's time
// (docs/measurements.md, "children in turn").
bool in_turn_down(const ScheduleBuilder& b, Slice vector);
// Sends `src` to `children` in that order, in turn or else all at once in chunks.
void send_down(ScheduleBuilder& b, std::span<const int> children, Slice src, bool in_turn);
// A child's side: the token to `parent` once `arrived` is done.
void acknowledge(ScheduleBuilder& b, int parent, std::span<const StepId> arrived);

// One block per position; a node handles the blocks of its whole subtree.
struct BlockLayout {
  std::function<Slice(int pos)> at;      // where block `pos` is kept on this rank
  std::function<bool(int pos)> joined;   // block pos directly follows pos-1 on every rank
};
// Every block reaches `at` on the root. `own_src` is where this rank's block starts out.
void binomial_gather_blocks(ScheduleBuilder& b, const Group& g, const BlockLayout& blocks,
                            Slice own_src);
// The root's blocks (read from `at`) reach their positions; each rank's lands in `own_dst`.
void binomial_scatter_blocks(ScheduleBuilder& b, const Group& g, const BlockLayout& blocks,
                             Slice own_dst);

// ---- hypercube phases (power-of-two groups; blocks contiguous and ascending) ----

struct Halving {
  std::vector<Range> blocks;  // one per position
  std::function<Slice(Range)> own;
  std::function<Slice(Range)> acc;
  bool acc_holds_own = false;
};
// Recursive halving: afterwards acc(blocks[pos]) holds the reduction of that block.
void recursive_halving(ScheduleBuilder& b, const Group& g, const Halving& spec);

struct Doubling {
  std::vector<Range> blocks;  // one per position
  std::function<Slice(Range)> dst;
  std::optional<Slice> own_src;  // this position's block, when it is not already in dst
};
// Recursive doubling: every position's block reaches dst on every member.
void recursive_doubling_allgather(ScheduleBuilder& b, const Group& g, const Doubling& spec);

// ---- allreduce among a group, in place ----
// `data` already holds this member's contribution and ends up holding the reduction over
// the group's members; every member passes a slice of the same count. Ranks outside g
// take no part, so several groups can run side by side on disjoint slices.

// Ring reduce-scatter then ring allgather: 2(n-1) steps, 2(n-1)/n of data per member.
void ring_allreduce_in_place(ScheduleBuilder& b, const Group& g, Slice data);
// Full-slice exchanges in log2 rounds (folding a non-power-of-two group first).
void recursive_doubling_allreduce_in_place(ScheduleBuilder& b, const Group& g, Slice data);

// ---- one rank combining many contributions ----

struct Contribution {
  int peer = -1;  // received from this rank, or -1: already local in `local`
  Slice local;
};
// target = parts[0] (op) parts[1] (op) ... in exactly this order, so every rank that runs
// the same reduction gets bit-identical floating-point results. A local part may be the
// target itself (in place) or overlap it; it is saved to scratch before being overwritten.
void reduce_in_order(ScheduleBuilder& b, std::vector<Contribution> parts, Slice target);

}  // namespace plait::coll
