// The tree allreduces' window: a rank sends chunk k up only once chunk k - (2 depth + 1) has
// come back down, so a subtree cannot run far ahead of its siblings and take the parent's
// link from them (binomial allreduce of 64 MiB on four 1 Gbit/s namespace hosts: 1.47 s
// without the window, 1.14 s with it). Checked on the schedules themselves: which receive
// from the parent each send to it waits for.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <vector>

#include "coll/schedule/binary_tree.h"
#include "coll/schedule/phases.h"
#include "coll/select/algorithms.h"
#include "unit/coll/schedule_ancestors.h"

namespace plait::coll {
namespace {

// A tree and the elements it carries.
struct TreePart {
  TreeLinks node;
  Range elements;
};

// For every rank of an allreduce, in every tree: send k to the parent waits for receive
// k - window from it and for no later one; the first `window` sends wait for none.
void expect_windows(Algorithm algo, int n, size_t count, size_t chunk,
                    const std::function<std::vector<TreePart>(int)>& parts) {
  for (bool in_place : {false, true}) {
    for (int rank = 0; rank < n; ++rank) {
      CollArgs a;
      a.op = CollOp::kAllreduce;
      a.size = n;
      a.rank = rank;
      a.count = count;
      a.chunk_count = chunk;
      a.in_place = in_place;
      const Schedule s = find_algorithm(a.op, algo)->build(a);
      for (const TreePart& part : parts(rank)) {
        if (part.node.parent < 0) continue;
        const size_t window = 2 * static_cast<size_t>(part.node.depth) + 1;
        // The parent in one tree of the double binary tree may be a child in the other: a
        // step belongs to the tree whose half of the vector it moves (staging is scratch).
        std::vector<StepId> up, down;
        for (StepId i = 0; i < s.steps.size(); ++i) {
          const Step& st = s.steps[i];
          const Slice& moved = st.kind == StepKind::kSend ? st.src : st.dst;
          if (st.peer != part.node.parent || moved.buffer == BufferId::kScratch ||
              moved.offset < part.elements.offset ||
              moved.offset >= part.elements.end())
            continue;
          (st.kind == StepKind::kSend ? up : down).push_back(i);
        }
        ASSERT_EQ(up.size(), part.elements.count / chunk) << "rank " << rank;
        ASSERT_EQ(up.size(), down.size()) << "rank " << rank;
        for (size_t k = 0; k < up.size(); ++k) {
          const std::set<StepId> anc = ancestors(s, up[k]);
          int latest = -1;
          for (size_t j = 0; j < down.size(); ++j)
            if (anc.count(down[j])) latest = static_cast<int>(j);
          const int expected = k < window ? -1 : static_cast<int>(k - window);
          EXPECT_EQ(latest, expected) << "n=" << n << " rank " << rank << " send " << k
                                      << " in_place=" << in_place;
        }
      }
    }
  }
}

TEST(TreeWindow, BinomialRanksSendAtMostTwoDepthPlusOneChunksAhead) {
  // Eight ranks: depths 1 (ranks 1, 2, 4), 2 (3, 5, 6) and 3 (7); 16 chunks.
  expect_windows(Algorithm::kBinomialTree, 8, 16 * 8, 8, [](int rank) {
    return std::vector<TreePart>{{binomial_links(rotated_group(8, rank, 0)), {0, 16 * 8}}};
  });
  EXPECT_EQ(binomial_links(rotated_group(8, 7, 0)).depth, 3);
  EXPECT_EQ(binomial_links(rotated_group(8, 4, 0)).depth, 1);
  EXPECT_EQ(binomial_links(rotated_group(8, 0, 0)).depth, 0);
}

TEST(TreeWindow, DoubleBinaryTreeRanksSendAtMostTwoDepthPlusOneChunksAhead) {
  // Ten ranks (depths up to 4 in a tree), 12 chunks a half.
  const size_t count = 2 * 12 * 4;
  expect_windows(Algorithm::kDoubleBinaryTree, 10, count, 4, [&](int rank) {
    const auto trees = double_binary_tree(10, rank);
    return std::vector<TreePart>{{trees[0], {0, count / 2}}, {trees[1], {count / 2, count / 2}}};
  });
}

TEST(TreeWindow, BinomialLinksListTheLargestSubtreeFirst) {
  const TreeLinks root = binomial_links(rotated_group(8, 0, 0));
  EXPECT_EQ(root.children, std::vector<int>({4, 2, 1}));
  // Rotated: the root is rank 3, position p is rank (p + 3) mod 8.
  const TreeLinks r7 = binomial_links(rotated_group(8, 7, 3));
  EXPECT_EQ(r7.parent, 3);
  EXPECT_EQ(r7.children, std::vector<int>({1, 0}));
}

TEST(TreeWindow, InorderDepthsAreTheWalkToTheRoot) {
  for (int n = 1; n <= 40; ++n) {
    for (int pos = 0; pos < n; ++pos) {
      int depth = 0;
      for (int at = pos; inorder_btree(n, at).parent >= 0; at = inorder_btree(n, at).parent)
        ++depth;
      EXPECT_EQ(inorder_btree(n, pos).depth, depth) << "n=" << n << " pos " << pos;
    }
  }
}

}  // namespace
}  // namespace plait::coll
