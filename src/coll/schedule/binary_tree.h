// Binary trees for the double binary tree allreduce (NCCL 2.4; the two-tree idea is from
// Sanders, Speck & Träff, "Two-tree algorithms for full bandwidth broadcast, reduction and
// scan", 2009), and the pipelined reduce-then-broadcast phase that runs along one tree.
//
// A binomial tree leaves most of its bandwidth unused: leaves only send up once, and the
// root's subtree fan-out is log2(n). In a binary tree every interior node has at most two
// children, and half the ranks are leaves. Two trees whose interior nodes are each other's
// leaves, each carrying half the vector, keep every rank's link busy in one tree while it
// idles as a leaf in the other, with a depth of only ~log2(n).
#pragma once

#include <array>
#include <vector>

#include "coll/schedule/builder.h"
#include "coll/schedule/phases.h"

namespace plait::coll {

// One node's links; ranks or positions, depending on the function that fills it.
struct TreeLinks {
  int parent = -1;            // -1 at the root
  std::vector<int> children;  // broadcast order: the largest subtree first
  int depth = 0;              // hops to the root
  // The whole tree's nodes send a vector of one piece down to their children one after
  // another (tree_reduce_bcast), every child but the last acknowledging it; before_sibling:
  // this node is not its parent's last.
  bool in_turn = false;
  bool before_sibling = false;
};

// In-order binary tree over positions [0, n): position p with lowest set bit b sits at
// height log2(b); its children are p - b/2 and the first of p + b/2, p + b/4, ... that is
// below n. Position 0 is the root and has one child, the largest power of two below n.
// Odd positions are the leaves; depth is ceil(log2 n). Positions, not ranks.
TreeLinks inorder_btree(int n, int pos);

// The two trees of the double binary tree for `rank`, in ranks. Tree 0 places rank r at
// position r (root: rank 0). Tree 1, for even n, mirrors it (rank r at position n-1-r,
// root: rank n-1): the mirror turns odd positions into even ranks, so every rank is a leaf
// in exactly one tree and interior in at most one. For odd n tree 1 shifts tree 0 by one
// rank (rank r at position r-1 mod n): a mirror would map leaves onto leaves, and with an
// odd count one rank (rank 0) is necessarily interior in both.
std::array<TreeLinks, 2> double_binary_tree(int n, int rank);

// The binomial tree over positions [0, n) rooted at 0 (phases.h's binomial_node) as links of
// `g`'s ranks, children largest subtree first.
TreeLinks binomial_links(const Group& g);
// Reduces every member's `own` into `acc` at the tree's root, then sends the root's acc back
// down into every member's acc: afterwards acc holds the reduction on every rank. Chunked
// by b.chunk(); the builder's hazard tracking lets chunk i travel down while chunk i+1 is
// still going up, and a node keeps at most 2 depth + 1 chunks up that have not come back
// (ScheduleBuilder::send_up_recv_down_chunks): the round trip to the root and back
// pipelined, and no subtree far ahead of its siblings. `own` may be the same elements as
// `acc` (in place).
void tree_reduce_bcast(ScheduleBuilder& b, const TreeLinks& node, Slice own, Slice acc);

}  // namespace plait::coll
