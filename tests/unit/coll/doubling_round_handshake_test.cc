// Recursive doubling's handshake: a round whose vector goes as one message of 256 KiB or
// more starts with a zero-byte token each way (ScheduleBuilder::handshake), so no rank's
// message lands on a link still busy with its partner's previous round. Checked on the
// schedules (which rounds have it, what waits for what) and in the replay, which must carry
// a token that is the only message in flight (it once stopped there, a third of the way).
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "coll/schedule/builder.h"
#include "coll/schedule/check.h"
#include "coll/select/algorithms.h"
#include "sim/replay.h"
#include "sim/topology_spec.h"
#include "unit/coll/schedule_ancestors.h"

namespace plait::coll {
namespace {

coll::CollArgs rd_allreduce(int rank, size_t count, size_t chunk) {
  CollArgs a;
  a.op = CollOp::kAllreduce;
  a.dtype = DataType::kF32;
  a.size = 8;
  a.rank = rank;
  a.count = count;
  a.chunk_count = chunk;
  return a;
}

TEST(RoundHandshake, RoundsAfterTheFirstWaitForThePartnersToken) {
  for (int rank = 0; rank < 8; ++rank) {
    const Schedule s = find_algorithm(CollOp::kAllreduce, Algorithm::kRecursiveDoubling)
                           ->build(rd_allreduce(rank, 1 << 18, 1 << 18));  // 1 MiB, one chunk
    std::vector<StepId> data_sends, token_recvs, token_sends, data_recvs;
    for (StepId i = 0; i < s.steps.size(); ++i) {
      const Step& st = s.steps[i];
      if (st.kind == StepKind::kSend) (is_token(st) ? token_sends : data_sends).push_back(i);
      if (st.kind == StepKind::kRecv && is_token(st)) token_recvs.push_back(i);
      if (st.kind != StepKind::kSend && !is_token(st) && st.kind != StepKind::kCopy &&
          st.kind != StepKind::kReduce)
        data_recvs.push_back(i);
    }
    ASSERT_EQ(data_sends.size(), 3u) << "rank " << rank;
    ASSERT_EQ(token_sends.size(), 2u) << "rank " << rank;
    ASSERT_EQ(token_recvs.size(), 2u) << "rank " << rank;
    for (int round = 1; round < 3; ++round) {
      const Step& send = s.steps[data_sends[round]];
      const StepId token_in = token_recvs[round - 1];
      const StepId token_out = token_sends[round - 1];
      EXPECT_EQ(s.steps[token_in].peer, send.peer);
      EXPECT_EQ(s.steps[token_out].peer, send.peer);
      EXPECT_EQ(send.peer, rank ^ (1 << round));
      // The data waits for the partner's token; our token waits for the previous round's
      // data to be in (through the combination that follows its receive).
      const auto deps = s.deps_of(send);
      EXPECT_TRUE(std::set<StepId>(deps.begin(), deps.end()).count(token_in)) << rank;
      EXPECT_TRUE(ancestors(s, token_out).count(data_recvs[round - 1])) << "rank " << rank << " round " << round;
    }
  }
}

TEST(RoundHandshake, NoneForSmallOrPipelinedRounds) {
  for (auto [count, chunk] : {std::pair<size_t, size_t>{1 << 10, 1 << 18},  // 4 KiB
                              {(1 << 16) - 1, 1 << 18},                       // just under
                              {1 << 20, 1 << 18}}) {                          // four chunks
    const Schedule s = find_algorithm(CollOp::kAllreduce, Algorithm::kRecursiveDoubling)
                           ->build(rd_allreduce(3, count, chunk));
    for (const Step& st : s.steps) EXPECT_FALSE(is_token(st)) << count << " / " << chunk;
  }
}

// Rounds big enough for the handshake, run through the checker (all ranks on real buffers,
// every send waiting for its receive to be posted) against the reference: the hypercube's
// halving and doubling phases, and recursive doubling's exchange. Integer-valued floats, so
// any reduction order is exact.
TEST(RoundHandshake, HypercubeRoundsWithTokensGiveTheReferenceResult) {
  const int n = 8;
  struct Case {
    CollOp op;
    Algorithm algo;
    size_t count;
  };
  for (const Case& c : {Case{CollOp::kAllreduce, Algorithm::kHalvingDoubling, 1 << 19},
                        Case{CollOp::kAllreduce, Algorithm::kRecursiveDoubling, 1 << 17},
                        Case{CollOp::kReduceScatter, Algorithm::kHalvingDoubling, 1 << 16},
                        Case{CollOp::kAllgather, Algorithm::kRecursiveDoubling, 1 << 16},
                        Case{CollOp::kBroadcast, Algorithm::kHalvingDoubling, 1 << 19}}) {
    std::vector<CollArgs> args;
    std::vector<Schedule> scheds;
    std::vector<std::vector<float>> in(n), out(n);
    std::vector<RankBuffers> bufs;
    for (int r = 0; r < n; ++r) {
      CollArgs a = rd_allreduce(r, c.count, 1 << 20);  // one chunk holds any round
      a.op = c.op;
      args.push_back(a);
      scheds.push_back(find_algorithm(c.op, c.algo)->build(a));
      const BufferLayout l = layout_of(a);
      in[r].resize(l.input_count);
      for (size_t i = 0; i < in[r].size(); ++i) in[r][i] = static_cast<float>((r + 1) * (i % 5));
      out[r].assign(l.output_count, -1.0f);
      bufs.push_back({std::as_writable_bytes(std::span(out[r])),
                      std::as_writable_bytes(std::span(in[r]))});
    }
    const std::string name(to_string(c.algo));
    size_t tokens = 0;
    for (const Step& st : scheds[0].steps) tokens += is_token(st);
    EXPECT_GT(tokens, 0u) << name;
    const CheckResult res = check_schedules(args, scheds, bufs);
    ASSERT_TRUE(res) << name << ": " << res.error;
    const float sum_ranks = n * (n + 1) / 2.0f;
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < out[r].size(); ++i) {
        float want = 0;
        switch (c.op) {
          case CollOp::kAllreduce: want = sum_ranks * (i % 5); break;
          case CollOp::kReduceScatter: want = sum_ranks * ((r * c.count + i) % 5); break;
          case CollOp::kAllgather:
            want = static_cast<float>((i / c.count + 1) * (i % c.count % 5));
            break;
          default: want = static_cast<float>(i % 5); break;  // broadcast from rank 0
        }
        ASSERT_EQ(out[r][i], want) << name << " rank " << r << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace plait::coll

namespace plait::sim {
namespace {

// Eight hosts, 1 Gbit/s, a FIFO at each host (the full replay; no other message in flight
// when a round's tokens go): three rounds of n at R, plus per round alpha, and per token
// round alpha more.
TEST(RoundHandshake, TheReplayCarriesTokensThatAreAloneInFlight) {
  coll::CollArgs a = coll::rd_allreduce(0, 1 << 18, 1 << 18);
  const double n = a.count * 4.0, R = 1.25e8, alpha = 20e-6;
  SimParams p;
  p.alpha_s = alpha;
  p.gamma_bytes_per_s = 1e18;
  p.copy_bytes_per_s = 1e18;
  auto fifo = parse_topology("star:hosts=8,rate=1gbit,latency=0us,queue=fifo");
  const ReplayResult r =
      replay(*fifo, {.ranks = 8, .ranks_per_host = 1}, a, coll::Algorithm::kRecursiveDoubling, p);
  EXPECT_EQ(r.method, "full");
  EXPECT_NEAR(r.time_s, 3 * (alpha + n / R) + 2 * alpha, 1e-9);
  EXPECT_EQ(r.rounds, 3);  // tokens order rounds; they are not rounds of data
}

}  // namespace
}  // namespace plait::sim
