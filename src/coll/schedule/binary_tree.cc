#include "coll/schedule/binary_tree.h"

#include <algorithm>
#include <bit>

namespace plait::coll {

namespace {

int inorder_parent(int n, int pos) {
  if (pos == 0) return -1;
  const int low = pos & -pos;
  // One level up is p - b when bit 2b is set (p is a right child), else p + b (p is a left
  // child); p + b past the end leaves p the right child of p - b, which then stops its
  // search for a right child at p (inorder_btree's loop).
  if (pos & (low << 1)) return pos - low;
  return pos + low < n ? pos + low : pos - low;
}

}  // namespace

TreeLinks inorder_btree(int n, int pos) {
  TreeLinks t;
  if (n <= 1) return t;
  for (int p = inorder_parent(n, pos); p >= 0; p = inorder_parent(n, p)) ++t.depth;
  if (pos == 0) {
    t.children.push_back(floor_pow2(n - 1));
    return t;
  }
  const int low = pos & -pos;
  t.parent = inorder_parent(n, pos);
  if (low > 1) {
    t.children.push_back(pos - low / 2);
    for (int step = low / 2; step >= 1; step /= 2) {
      if (pos + step < n) {
        t.children.push_back(pos + step);
        break;
      }
    }
  }
  return t;
}

TreeLinks binomial_links(const Group& g) {
  const TreeNode node = binomial_node(g.n(), g.pos);
  TreeLinks t;
  t.in_turn = true;
  if (node.parent >= 0) {
    t.parent = g.rank(node.parent);
    t.before_sibling = binomial_node(g.n(), node.parent).children.front() != g.pos;
  }
  for (auto it = node.children.rbegin(); it != node.children.rend(); ++it)
    t.children.push_back(g.rank(*it));
  t.depth = std::popcount(static_cast<unsigned>(g.pos));  // a parent clears the lowest bit
  return t;
}

std::array<TreeLinks, 2> double_binary_tree(int n, int rank) {
  std::array<TreeLinks, 2> trees;
  trees[0] = inorder_btree(n, rank);
  const bool mirror = n % 2 == 0;
  auto to_pos = [&](int r) { return mirror ? n - 1 - r : wrap(r - 1, n); };
  auto to_rank = [&](int p) { return mirror ? n - 1 - p : wrap(p + 1, n); };
  TreeLinks t = inorder_btree(n, to_pos(rank));
  if (t.parent >= 0) t.parent = to_rank(t.parent);
  for (int& c : t.children) c = to_rank(c);
  trees[1] = std::move(t);
  return trees;
}

void tree_reduce_bcast(ScheduleBuilder& b, const TreeLinks& node, Slice own, Slice acc) {
  const size_t chunk = b.chunk();
  bool holds = same_region(b.where(own), b.where(acc));
  if (node.children.empty()) {
    if (node.parent < 0 && !holds) b.copy(own, acc);  // a one-rank tree
  } else {
    const size_t slot = chunk ? std::min(chunk, acc.count) : acc.count;
    for (int child : node.children) {
      if (!holds) {
        // Out of place, the first child's data lands in acc and our own is folded in:
        // no staging, no copy.
        b.recv_then_reduce_chunks(child, acc, own, chunk);
        holds = true;
      } else {
        // A staging ring per child, so both children's chunks can land at once while the
        // reductions into acc take turns.
        StagingRing ring(b, slot, chunk ? 2 : 1);
        recv_staged_reduce_chunks(b, child, acc, ring, chunk);
      }
    }
  }
  // Down: the receive of chunk i waits for chunk i's send up (it overwrites the partial
  // sum), so the two directions overlap chunk by chunk. A leaf sends straight from `own`.
  // In turn as binomial_bcast (binomial allreduce of 1 MiB on eight 200 Mbit/s hosts: the
  // root's three messages down shared its link, 351 ms against 253).
  const bool in_turn = node.in_turn && in_turn_down(b, acc);
  if (node.parent >= 0) {
    b.send_up_recv_down_chunks(node.parent, holds ? acc : own, acc, chunk,
                               2 * static_cast<size_t>(node.depth) + 1);
    const StepId down = b.last_step();  // in one piece: its receive
    if (in_turn && node.before_sibling) acknowledge(b, node.parent, std::span(&down, 1));
  }
  send_down(b, node.children, acc, in_turn);
}

}  // namespace plait::coll
