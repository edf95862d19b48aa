// The binomial broadcast sends a node's messages to its children one after another: each
// child but the last acknowledges its message with a zero-byte token and the node's next send
// waits for it, for messages of kHandshakeBytes up to TCP's eager threshold sent in one piece
// (posted together, the root's three messages on eight 200 Mbit/s namespace hosts shared its
// link and all arrived late: binomial allgather of 1 MiB, 251 ms where 159 was possible).
// The binomial allreduce's way down does the same (tree_reduce_bcast with binomial links);
// the double binary tree's does not. Checked on the schedules and through the checker.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "coll/schedule/builder.h"
#include "coll/schedule/check.h"
#include "coll/select/algorithms.h"
#include "unit/coll/schedule_ancestors.h"

namespace plait::coll {
namespace {

constexpr size_t kBig = ScheduleBuilder::kHandshakeBytes / 4;  // floats: 256 KiB

CollArgs broadcast(int size, int rank, size_t count, int root = 0, size_t chunk = 0) {
  CollArgs a;
  a.op = CollOp::kBroadcast;
  a.dtype = DataType::kF32;
  a.size = size;
  a.rank = rank;
  a.root = root;
  a.count = count;
  a.chunk_count = chunk;
  return a;
}

Schedule build(const CollArgs& a) {
  return find_algorithm(a.op, Algorithm::kBinomialTree)->build(a);
}

std::vector<StepId> steps_of(const Schedule& s, StepKind kind, bool token) {
  std::vector<StepId> ids;
  for (StepId i = 0; i < s.steps.size(); ++i)
    if (s.steps[i].kind == kind && is_token(s.steps[i]) == token) ids.push_back(i);
  return ids;
}

TEST(BinomialBcastInTurn, EachSendWaitsForTheSiblingBeforeIt) {
  // Eight ranks rooted at 0: the root sends to 4, 2, 1; rank 4 to 6, 5; rank 2 to 3.
  const std::vector<std::vector<int>> children = {{4, 2, 1}, {}, {3}, {}, {6, 5}, {}, {7}, {}};
  const std::set<int> last_children = {1, 3, 5, 7};  // no acknowledgement: nothing waits
  for (int rank = 0; rank < 8; ++rank) {
    const Schedule s = build(broadcast(8, rank, kBig));
    const std::vector<StepId> sends = steps_of(s, StepKind::kSend, false);
    const std::vector<StepId> acks = steps_of(s, StepKind::kRecv, true);
    const std::vector<int>& kids = children[static_cast<size_t>(rank)];
    ASSERT_EQ(sends.size(), kids.size()) << "rank " << rank;
    ASSERT_EQ(acks.size(), kids.empty() ? 0 : kids.size() - 1) << "rank " << rank;
    for (size_t i = 0; i < kids.size(); ++i) {
      EXPECT_EQ(s.steps[sends[i]].peer, kids[i]) << "rank " << rank;
      if (i + 1 < kids.size()) EXPECT_EQ(s.steps[acks[i]].peer, kids[i]) << "rank " << rank;
      if (i > 0) {
        EXPECT_TRUE(ancestors(s, sends[i]).count(acks[i - 1]))
            << "rank " << rank << ": its send to " << kids[i] << " does not wait for "
            << kids[i - 1] << "'s acknowledgement";
      }
    }
    const std::vector<StepId> tokens_out = steps_of(s, StepKind::kSend, true);
    if (rank == 0 || last_children.count(rank)) {
      EXPECT_TRUE(tokens_out.empty()) << "rank " << rank;
      continue;
    }
    ASSERT_EQ(tokens_out.size(), 1u) << "rank " << rank;
    const StepId data_in = steps_of(s, StepKind::kRecv, false).at(0);
    EXPECT_TRUE(ancestors(s, tokens_out[0]).count(data_in))
        << "rank " << rank << " acknowledges before its message is in";
  }
}

TEST(BinomialBcastInTurn, NoneForSmallChunkedOrRendezvousSizedMessages) {
  const size_t rendezvous = ScheduleBuilder::kRendezvousBytes / 4;
  const struct {
    size_t count, chunk;
  } cases[] = {{kBig - 1, 0}, {rendezvous, 0}, {2 * kBig, kBig}};
  for (const auto& c : cases)
    for (int rank = 0; rank < 8; ++rank)
      for (const Step& st : build(broadcast(8, rank, c.count, 0, c.chunk)).steps)
        EXPECT_FALSE(is_token(st)) << c.count << " floats in chunks of " << c.chunk;
}

TEST(BinomialBcastInTurn, BroadcastAndAllgatherGiveTheReferenceResult) {
  for (const int n : {2, 5, 8}) {
    for (const CollOp op : {CollOp::kBroadcast, CollOp::kAllgather}) {
      const int root = op == CollOp::kBroadcast ? n - 1 : 0;
      // An allgather's broadcast moves all n blocks: n * block >= kBig.
      const size_t count = op == CollOp::kBroadcast ? kBig : (kBig + n - 1) / n;
      std::vector<CollArgs> args;
      std::vector<Schedule> scheds;
      std::vector<std::vector<float>> in(n), out(n);
      std::vector<RankBuffers> bufs;
      for (int r = 0; r < n; ++r) {
        CollArgs a = broadcast(n, r, count, root);
        a.op = op;
        args.push_back(a);
        scheds.push_back(build(a));
        const BufferLayout l = layout_of(a);
        in[r].resize(l.input_count);
        out[r].assign(l.output_count, -1.0f);
        for (size_t i = 0; i < l.input_count; ++i) in[r][i] = static_cast<float>(r * 7 + i % 1000);
        bufs.push_back({std::as_writable_bytes(std::span(out[r])),
                        std::as_writable_bytes(std::span(in[r]))});
      }
      const CheckResult res = check_schedules(args, scheds, bufs);
      ASSERT_TRUE(res) << n << " ranks, op " << static_cast<int>(op) << ": " << res.error;
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < out[r].size(); i += 997) {
          const int from = op == CollOp::kBroadcast ? root : static_cast<int>(i / count);
          const size_t at = op == CollOp::kBroadcast ? i : i % count;
          ASSERT_EQ(out[r][i], static_cast<float>(from * 7 + at % 1000))
              << n << " ranks, op " << static_cast<int>(op) << ": rank " << r << " element " << i;
        }
      }
    }
  }
}

CollArgs allreduce(int size, int rank, size_t count, bool in_place = false) {
  CollArgs a = broadcast(size, rank, count);
  a.op = CollOp::kAllreduce;
  a.in_place = in_place;
  return a;
}

TEST(BinomialBcastInTurn, TheAllreducesWayDownToo) {
  const std::vector<std::vector<int>> children = {{4, 2, 1}, {}, {3}, {}, {6, 5}, {}, {7}, {}};
  const std::vector<int> parent = {-1, 0, 0, 2, 0, 4, 4, 6};
  const std::set<int> last_children = {1, 3, 5, 7};
  for (int rank = 0; rank < 8; ++rank) {
    const Schedule s = build(allreduce(8, rank, kBig));
    const std::vector<int>& kids = children[static_cast<size_t>(rank)];
    std::vector<StepId> down, acks, tokens_out;
    for (StepId i = 0; i < s.steps.size(); ++i) {
      const Step& st = s.steps[i];
      if (st.kind == StepKind::kSend && is_token(st)) tokens_out.push_back(i);
      if (st.kind == StepKind::kSend && !is_token(st) && st.peer != parent[rank])
        down.push_back(i);
      if (st.kind == StepKind::kRecv && is_token(st)) acks.push_back(i);
    }
    ASSERT_EQ(down.size(), kids.size()) << "rank " << rank;
    ASSERT_EQ(acks.size(), kids.empty() ? 0 : kids.size() - 1) << "rank " << rank;
    for (size_t i = 1; i < kids.size(); ++i) {
      EXPECT_EQ(s.steps[acks[i - 1]].peer, kids[i - 1]) << "rank " << rank;
      EXPECT_TRUE(ancestors(s, down[i]).count(acks[i - 1])) << "rank " << rank << " child " << i;
    }
    const bool acknowledges = rank != 0 && !last_children.count(rank);
    ASSERT_EQ(tokens_out.size(), acknowledges ? 1u : 0u) << "rank " << rank;
    if (acknowledges) EXPECT_EQ(s.steps[tokens_out[0]].peer, parent[rank]);
    // The double binary tree's way down is as before: no tokens.
    const Schedule dbt = find_algorithm(CollOp::kAllreduce, Algorithm::kDoubleBinaryTree)
                             ->build(allreduce(8, rank, 2 * kBig));
    for (const Step& st : dbt.steps) EXPECT_FALSE(is_token(st)) << "rank " << rank;
  }
}

TEST(BinomialBcastInTurn, TheAllreduceGivesTheReferenceResult) {
  for (const int n : {2, 5, 8}) {
    for (const bool in_place : {false, true}) {
      std::vector<CollArgs> args;
      std::vector<Schedule> scheds;
      std::vector<std::vector<float>> in(n), out(n);
      std::vector<RankBuffers> bufs;
      for (int r = 0; r < n; ++r) {
        args.push_back(allreduce(n, r, kBig, in_place));
        scheds.push_back(build(args.back()));
        in[r].assign(kBig, 0.0f);
        out[r].assign(kBig, -1.0f);
        for (size_t i = 0; i < kBig; ++i)
          (in_place ? out[r] : in[r])[i] = static_cast<float>(r + 1 + i % 7);
        bufs.push_back({std::as_writable_bytes(std::span(out[r])),
                        std::as_writable_bytes(std::span(in[r]))});
      }
      const CheckResult res = check_schedules(args, scheds, bufs);
      ASSERT_TRUE(res) << n << " ranks, in place " << in_place << ": " << res.error;
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < kBig; i += 997)
          ASSERT_EQ(out[r][i], static_cast<float>(n * (n + 1) / 2 + n * (i % 7)))
              << n << " ranks, in place " << in_place << ": rank " << r << " element " << i;
    }
  }
}

}  // namespace
}  // namespace plait::coll
