#include "coll/schedule/phases.h"

#include <algorithm>

namespace plait::coll {

void binomial_reduce(ScheduleBuilder& b, const Group& g, Slice own, Slice acc) {
  const TreeNode t = binomial_node(g.n(), g.pos);
  const size_t chunk = b.chunk();
  bool acc_has_own = same_region(b.where(own), b.where(acc));
  if (t.children.empty()) {
    if (t.parent >= 0) b.send_chunks(g.rank(t.parent), own, chunk);
    else if (!acc_has_own) b.copy(own, acc);
    return;
  }
  const size_t slot = chunk ? std::min(chunk, acc.count) : acc.count;
  for (int child : t.children) {
    if (!acc_has_own) {
      b.recv_then_reduce_chunks(g.rank(child), acc, own, chunk);
      acc_has_own = true;
    } else {
      // One staging ring per child, so children's messages land in parallel while the
      // reductions into acc take their turn.
      StagingRing ring(b, slot, chunk ? 2 : 1);
      recv_staged_reduce_chunks(b, g.rank(child), acc, ring, chunk);
    }
  }
  if (t.parent >= 0) b.send_chunks(g.rank(t.parent), acc, chunk);
}

void binomial_bcast(ScheduleBuilder& b, const Group& g, Slice src, Slice dst) {
  const TreeNode t = binomial_node(g.n(), g.pos);
  const bool in_turn = in_turn_down(b, dst);
  Slice from = dst;
  if (t.parent >= 0) {
    const std::vector<StepId> in = b.recv_chunks(g.rank(t.parent), dst, b.chunk());
    // The parent's last child is its smallest subtree, children.front().
    if (in_turn && binomial_node(g.n(), t.parent).children.front() != g.pos)
      acknowledge(b, g.rank(t.parent), in);
  } else {
    from = src;
  }
  // Largest subtree first: it has the longest way to go.
  std::vector<int> children;
  for (auto it = t.children.rbegin(); it != t.children.rend(); ++it)
    children.push_back(g.rank(*it));
  send_down(b, children, from, in_turn);
  if (t.parent < 0) b.copy(src, dst);
}

bool in_turn_down(const ScheduleBuilder& b, Slice vector) {
  return (b.chunk() == 0 || vector.count <= b.chunk()) && b.acknowledged(vector.count);
}

void send_down(ScheduleBuilder& b, std::span<const int> children, Slice src, bool in_turn) {
  const Slice token{BufferId::kOutput, 0, 0};
  std::optional<StepId> taken;
  for (size_t i = 0; i < children.size(); ++i) {
    if (!in_turn) {
      b.send_chunks(children[i], src, b.chunk());
      continue;
    }
    b.send(children[i], src, taken ? std::span<const StepId>(&*taken, 1)
                                   : std::span<const StepId>());
    if (i + 1 < children.size()) taken = b.recv(children[i], token);
  }
}

void acknowledge(ScheduleBuilder& b, int parent, std::span<const StepId> arrived) {
  b.send(parent, Slice{BufferId::kOutput, 0, 0}, arrived);
}

namespace {

// Calls f(slice) for each maximal run of blocks [first, last) that is contiguous on every
// rank; both ends of a message compute the same runs.
template <typename F>
void for_each_run(const BlockLayout& blocks, int first, int last, F&& f) {
  int u = first;
  while (u < last) {
    Slice run = blocks.at(u);
    int v = u + 1;
    for (; v < last && blocks.joined(v); ++v) run.count += blocks.at(v).count;
    f(run);
    u = v;
  }
}

}  // namespace

void binomial_gather_blocks(ScheduleBuilder& b, const Group& g, const BlockLayout& blocks,
                            Slice own_src) {
  const TreeNode t = binomial_node(g.n(), g.pos);
  const size_t chunk = b.chunk();
  const bool leaf = t.children.empty();
  if (!leaf || t.parent < 0) b.copy(own_src, blocks.at(g.pos));
  for (int child : t.children) {
    const TreeNode c = binomial_node(g.n(), child);
    for_each_run(blocks, child, c.end, [&](Slice run) { b.recv_chunks(g.rank(child), run, chunk); });
  }
  if (t.parent < 0) return;
  if (leaf) {
    b.send_chunks(g.rank(t.parent), own_src, chunk);
  } else {
    for_each_run(blocks, g.pos, t.end,
                 [&](Slice run) { b.send_chunks(g.rank(t.parent), run, chunk); });
  }
}

void binomial_scatter_blocks(ScheduleBuilder& b, const Group& g, const BlockLayout& blocks,
                             Slice own_dst) {
  const TreeNode t = binomial_node(g.n(), g.pos);
  const size_t chunk = b.chunk();
  const bool leaf = t.children.empty();
  if (t.parent >= 0) {
    if (leaf) {
      b.recv_chunks(g.rank(t.parent), own_dst, chunk);
    } else {
      for_each_run(blocks, g.pos, t.end,
                   [&](Slice run) { b.recv_chunks(g.rank(t.parent), run, chunk); });
    }
  }
  for (auto it = t.children.rbegin(); it != t.children.rend(); ++it) {
    const TreeNode c = binomial_node(g.n(), *it);
    for_each_run(blocks, *it, c.end, [&](Slice run) { b.send_chunks(g.rank(*it), run, chunk); });
  }
  if (!leaf || t.parent < 0) b.copy(blocks.at(g.pos), own_dst);
}

}  // namespace plait::coll
