// Recursive doubling's handshake: a round whose vector goes as one message of 256 KiB or
// more starts with a zero-byte token each way (ScheduleBuilder::handshake), so no rank's
// message lands on a link still busy with its partner's previous round. Checked on the
// schedules (which rounds have it, what waits for what) and in the replay, which must carry
// a token that is the only message in flight (it once stopped there, a third of the way).
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "coll/algorithms.h"
#include "sim/replay.h"
#include "sim/topology_spec.h"

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

bool is_token(const Step& s) {
  return (s.kind == StepKind::kSend && s.src.count == 0) ||
         (s.kind == StepKind::kRecv && s.dst.count == 0);
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
      std::set<StepId> before;
      for (std::vector<StepId> todo = {token_out}; !todo.empty();) {
        const StepId x = todo.back();
        todo.pop_back();
        for (StepId d : s.deps_of(s.steps[x]))
          if (before.insert(d).second) todo.push_back(d);
      }
      EXPECT_TRUE(before.count(data_recvs[round - 1])) << "rank " << rank << " round " << round;
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
