// The pairwise-exchange alltoall acknowledges a message of kHandshakeBytes up to TCP's eager
// threshold: its receiver sends a zero-byte token back once it is in, and the sender's next
// step waits for that token, since an eager send completes when the transport has its bytes,
// not when they arrive (without it, a launch on eight 200 Mbit/s namespace hosts could run
// 4 MiB in 285 ms instead of 154). Checked on the schedules and through the checker.
#include <gtest/gtest.h>

#include <vector>

#include "coll/schedule/builder.h"
#include "coll/schedule/check.h"
#include "coll/select/algorithms.h"
#include "unit/coll/schedule_ancestors.h"

namespace plait::coll {
namespace {

CollArgs ring_alltoall(int size, int rank, size_t block, bool in_place = false) {
  CollArgs a;
  a.op = CollOp::kAlltoall;
  a.dtype = DataType::kF32;
  a.size = size;
  a.rank = rank;
  a.count = block;  // elements to each peer
  a.in_place = in_place;
  return a;
}

Schedule build(const CollArgs& a) {
  return find_algorithm(CollOp::kAlltoall, Algorithm::kRing)->build(a);
}

constexpr size_t kBigBlock = ScheduleBuilder::kHandshakeBytes / 4;  // floats: 256 KiB

TEST(AlltoallRingAck, EachDataSendWaitsForTheLastOnesAcknowledgement) {
  const int n = 8;
  for (int rank = 0; rank < n; ++rank) {
    const Schedule s = build(ring_alltoall(n, rank, kBigBlock));
    std::vector<StepId> data_sends, ack_recvs, ack_sends;
    for (StepId i = 0; i < s.steps.size(); ++i) {
      const Step& st = s.steps[i];
      if (st.kind == StepKind::kSend && !is_token(st)) data_sends.push_back(i);
      if (st.kind == StepKind::kRecv && is_token(st)) ack_recvs.push_back(i);
      if (st.kind == StepKind::kSend && is_token(st)) ack_sends.push_back(i);
    }
    ASSERT_EQ(data_sends.size(), static_cast<size_t>(n - 1));
    ASSERT_EQ(ack_recvs.size(), static_cast<size_t>(n - 1));
    ASSERT_EQ(ack_sends.size(), static_cast<size_t>(n - 1));
    for (int i = 0; i < n - 1; ++i) {
      // The acknowledgement comes from the rank this step sent to...
      EXPECT_EQ(s.steps[ack_recvs[i]].peer, s.steps[data_sends[i]].peer);
      // ...and goes to the rank it received from, once that message is in.
      const int from = (rank - (i + 1) + n) % n;
      EXPECT_EQ(s.steps[ack_sends[i]].peer, from);
      bool after_the_receive = false;
      for (StepId d : ancestors(s, ack_sends[i]))
        after_the_receive |= s.steps[d].kind == StepKind::kRecv && s.steps[d].peer == from &&
                             !is_token(s.steps[d]);
      EXPECT_TRUE(after_the_receive) << "rank " << rank << " step " << i + 1;
      if (i > 0) {
        EXPECT_TRUE(ancestors(s, data_sends[i]).count(ack_recvs[i - 1]))
            << "rank " << rank << ": step " << i + 1 << " does not wait for step " << i
            << "'s acknowledgement";
      }
    }
  }
}

TEST(AlltoallRingAck, NoneForSmallBlocksNorForRendezvousSizedOnes) {
  for (const size_t block : {kBigBlock - 1, size_t{2} << 20 >> 2}) {  // 2 MiB: a rendezvous
    const Schedule s = build(ring_alltoall(4, 3, block));
    for (const Step& st : s.steps) EXPECT_FALSE(is_token(st)) << block << " floats";
  }
}

TEST(AlltoallRingAck, AcknowledgedSchedulesGiveTheReferenceResult) {
  for (const int n : {2, 5, 8}) {  // 2 and 8: a step whose sender and receiver are one rank
    for (const bool in_place : {false, true}) {
      std::vector<CollArgs> args;
      std::vector<Schedule> scheds;
      std::vector<std::vector<float>> in(n), out(n);
      std::vector<RankBuffers> bufs;
      for (int r = 0; r < n; ++r) {
        args.push_back(ring_alltoall(n, r, kBigBlock, in_place));
        scheds.push_back(build(args.back()));
        const BufferLayout l = layout_of(args.back());
        in[r].resize(l.input_count);
        out[r].assign(l.output_count, -1.0f);
        for (size_t i = 0; i < l.input_count; ++i) {
          const float v = static_cast<float>(r * 1000 + i / kBigBlock);  // (sender, block)
          (in_place ? out[r] : in[r])[i] = v;
        }
        bufs.push_back({std::as_writable_bytes(std::span(out[r])),
                        std::as_writable_bytes(std::span(in[r]))});
      }
      const CheckResult res = check_schedules(args, scheds, bufs);
      ASSERT_TRUE(res) << n << " ranks: " << res.error;
      for (int r = 0; r < n; ++r)
        for (int p = 0; p < n; ++p)
          ASSERT_EQ(out[r][static_cast<size_t>(p) * kBigBlock], static_cast<float>(p * 1000 + r))
              << n << " ranks, in place " << in_place << ": rank " << r << " block " << p;
    }
  }
}

}  // namespace
}  // namespace plait::coll
