// Collectives over the collective segment with ranks as threads of this process: every op
// against a reference, counts around the round size, in place, several collectives in a row
// (parities reused), mismatches, and a rank that never comes.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <thread>

#include "coll/segment/segment_run.h"
#include "core/clock.h"
#include "plait/store.h"

namespace plait::coll::segment {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kSlot = 4096;  // small, so that rounds, splits and parities all get used

// One collective call as every rank makes it.
struct Call {
  CollOp op = CollOp::kAllreduce;
  DataType dtype = DataType::kF32;
  ReduceOp redop = ReduceOp::kSum;
  int root = 0;
  size_t count = 0;
  bool in_place = false;
};

// Small integers: exact in every dtype and reduction order.
double value(int rank, size_t i) { return static_cast<double>((rank * 7 + i * 3) % 23 + 1); }

void set(std::vector<uint8_t>& b, DataType t, size_t i, double v) {
  switch (t) {
    case DataType::kF32: { float x = static_cast<float>(v); std::memcpy(&b[i * 4], &x, 4); break; }
    case DataType::kF64: std::memcpy(&b[i * 8], &v, 8); break;
    case DataType::kI32: { int32_t x = static_cast<int32_t>(v); std::memcpy(&b[i * 4], &x, 4); break; }
    case DataType::kU8: b[i] = static_cast<uint8_t>(v); break;
    default: break;
  }
}
double combine(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kMax: return std::max(a, b);
    case ReduceOp::kMin: return std::min(a, b);
    default: return a + b;
  }
}

// Runs `calls` in order on `size` thread ranks; returns per rank per call its output (or
// the error text).
struct Outcome {
  std::vector<std::vector<uint8_t>> out;  // [call]
  std::string error;
};

std::vector<Outcome> run(int size, const std::vector<Call>& calls,
                         const std::function<bool(int rank, size_t call)>& skip = {},
                         uint64_t slot = kSlot) {
  auto store = make_hash_store();
  std::vector<Outcome> outcomes(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      Outcome& o = outcomes[r];
      try {
        auto seg = CollectiveSegment::attach(r, size, *store, "seg", slot, Deadline::after(10s));
        uint64_t round = 1;
        for (size_t c = 0; c < calls.size(); ++c) {
          if (skip && skip(r, c)) break;
          const Call& call = calls[c];
          const size_t elem = dtype_size(call.dtype);
          const size_t in_count = call.op == CollOp::kReduceScatter ? call.count * size : call.count;
          const size_t out_count = call.op == CollOp::kAllgather ? call.count * size : call.count;
          std::vector<uint8_t> in(in_count * elem), out(std::max(in_count, out_count) * elem, 0xee);
          for (size_t i = 0; i < in_count; ++i) set(in, call.dtype, i, value(r, i));
          void* src = in.data();
          if (call.in_place) {
            if (call.op == CollOp::kAllgather) {
              std::memcpy(out.data() + static_cast<size_t>(r) * call.count * elem, in.data(), in.size());
              src = out.data() + static_cast<size_t>(r) * call.count * elem;
            } else {
              std::memcpy(out.data(), in.data(), in.size());
              src = out.data();
            }
          }
          CollArgs args;
          args.op = call.op;
          args.rank = r;
          args.size = size;
          args.dtype = call.dtype;
          args.redop = call.redop;
          args.root = call.root;
          args.count = call.count;
          args.in_place = call.in_place;
          Signature sig{.seq = c + 1, .op = call.op, .dtype = call.dtype, .redop = call.redop,
                        .root = call.op == CollOp::kReduce || call.op == CollOp::kBroadcast ? call.root : -1,
                        .count = call.count};
          SegmentRun run;
          run.start(seg.get(), args, src, out.data(), round, sig, {});
          const Deadline deadline = Deadline::after(5s);
          while (!run.done()) {
            if (!run.progress()) std::this_thread::yield();
            if (deadline.expired()) throw timeout_error("waiting for " + run.waiting_for());
          }
          if (run.error()) throw *run.error();
          round += run.rounds();
          out.resize(out_count * elem);
          o.out.push_back(std::move(out));
        }
      } catch (const Error& e) {
        o.error = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

// The reference result of `call` on rank `r`; empty where the output is unspecified.
std::vector<uint8_t> expected(const Call& call, int size, int r) {
  const size_t elem = dtype_size(call.dtype);
  std::vector<uint8_t> want;
  auto reduced = [&](size_t i) {
    double acc = value(0, i);
    for (int q = 1; q < size; ++q) acc = combine(call.redop, acc, value(q, i));
    return acc;
  };
  switch (call.op) {
    case CollOp::kAllreduce:
      want.resize(call.count * elem);
      for (size_t i = 0; i < call.count; ++i) set(want, call.dtype, i, reduced(i));
      break;
    case CollOp::kReduce:
      if (r != call.root) return {};
      want.resize(call.count * elem);
      for (size_t i = 0; i < call.count; ++i) set(want, call.dtype, i, reduced(i));
      break;
    case CollOp::kBroadcast:
      want.resize(call.count * elem);
      for (size_t i = 0; i < call.count; ++i) set(want, call.dtype, i, value(call.root, i));
      break;
    case CollOp::kAllgather:
      want.resize(call.count * size * elem);
      for (int q = 0; q < size; ++q)
        for (size_t i = 0; i < call.count; ++i)
          set(want, call.dtype, q * call.count + i, value(q, i));
      break;
    case CollOp::kReduceScatter:
      want.resize(call.count * elem);
      for (size_t i = 0; i < call.count; ++i) set(want, call.dtype, i, reduced(r * call.count + i));
      break;
    default: break;
  }
  return want;
}

void check(int size, const std::vector<Call>& calls, uint64_t slot = kSlot) {
  auto outcomes = run(size, calls, {}, slot);
  for (int r = 0; r < size; ++r) {
    ASSERT_EQ(outcomes[r].error, "") << "rank " << r;
    ASSERT_EQ(outcomes[r].out.size(), calls.size());
    for (size_t c = 0; c < calls.size(); ++c) {
      std::vector<uint8_t> want = expected(calls[c], size, r);
      if (want.empty()) continue;
      EXPECT_EQ(outcomes[r].out[c], want)
          << "rank " << r << " of " << size << ", " << to_string(calls[c].op) << " count "
          << calls[c].count << " " << to_string(calls[c].dtype) << (calls[c].in_place ? " in place" : "");
    }
  }
}

class SegmentRunSizes : public ::testing::TestWithParam<int> {};

TEST_P(SegmentRunSizes, EveryOpMatchesTheReferenceAcrossRoundsAndParities) {
  const int size = GetParam();
  std::vector<Call> calls;
  // 1024 f32 fill one 4 KiB slot: around it, and many rounds; u8/f64/i32 for element sizes.
  for (size_t count : {size_t{0}, size_t{1}, size_t{1023}, size_t{1024}, size_t{1025}, size_t{5000}}) {
    for (bool in_place : {false, true}) {
      calls.push_back({CollOp::kAllreduce, DataType::kF32, ReduceOp::kSum, 0, count, in_place});
      calls.push_back({CollOp::kReduce, DataType::kI32, ReduceOp::kMax, size - 1, count, in_place});
      calls.push_back({CollOp::kBroadcast, DataType::kF64, ReduceOp::kSum, size / 2, count, in_place});
      calls.push_back({CollOp::kAllgather, DataType::kU8, ReduceOp::kSum, 0, count, in_place});
      calls.push_back({CollOp::kReduceScatter, DataType::kF32, ReduceOp::kMin, 0, count, in_place});
      calls.push_back({CollOp::kBarrier, DataType::kF32, ReduceOp::kSum, 0, 0, false});
    }
  }
  check(size, calls);
}

// Tiny counts for every element size, on both parities, and a call whose last round is a
// few elements after full ones (4 KiB slots).
TEST_P(SegmentRunSizes, TinyCountsAndTinyLastRounds) {
  const int size = GetParam();
  std::vector<Call> calls;
  for (auto [dtype, edge] : {std::pair{DataType::kU8, size_t{16}}, std::pair{DataType::kF32, size_t{4}},
                             std::pair{DataType::kF64, size_t{2}}}) {
    for (size_t count : {edge - 1, edge, edge + 1, size_t{2048} + edge / 2}) {
      calls.push_back({CollOp::kAllreduce, dtype, ReduceOp::kMax, 0, count, false});
      calls.push_back({CollOp::kReduce, dtype, ReduceOp::kSum, size - 1, count, true});
      calls.push_back({CollOp::kBroadcast, dtype, ReduceOp::kSum, size / 2, count, false});
      calls.push_back({CollOp::kAllgather, dtype, ReduceOp::kSum, 0, count, false});
      calls.push_back({CollOp::kReduceScatter, dtype, ReduceOp::kSum, 0, std::max<size_t>(1, count / size), false});
    }
  }
  check(size, calls);
}

INSTANTIATE_TEST_SUITE_P(Ranks, SegmentRunSizes, ::testing::Values(1, 2, 3, 4, 5));

// Above 16 KiB per round, reductions over 3 or more ranks are split (every rank reduces a
// part into the shared output): 64 KiB slots, counts across rounds and part boundaries.
TEST_P(SegmentRunSizes, SplitReductionsMatchTheReference) {
  const int size = GetParam();
  std::vector<Call> calls;
  for (size_t count : {size_t{4097}, size_t{16384}, size_t{16385}, size_t{40000}}) {
    for (bool in_place : {false, true}) {
      calls.push_back({CollOp::kAllreduce, DataType::kF32, ReduceOp::kSum, 0, count, in_place});
      calls.push_back({CollOp::kAllreduce, DataType::kU8, ReduceOp::kMax, 0, count, in_place});
      calls.push_back({CollOp::kReduce, DataType::kF64, ReduceOp::kSum, size - 1, count, in_place});
      calls.push_back({CollOp::kReduce, DataType::kI32, ReduceOp::kMin, 0, count, in_place});
    }
  }
  check(size, calls, 64 << 10);
}

TEST(SegmentRun, ARankInAnotherCollectiveIsAMismatchNamingIt) {
  std::vector<Call> mine = {{CollOp::kAllreduce, DataType::kF32, ReduceOp::kSum, 0, 8, false}};
  auto store = make_hash_store();
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto seg = CollectiveSegment::attach(r, 2, *store, "seg", kSlot, Deadline::after(10s));
      std::vector<float> buf(16, 1.0f);
      CollArgs args;
      args.rank = r;
      args.size = 2;
      args.count = r == 0 ? 8 : 16;
      Signature sig{.seq = 1, .op = CollOp::kAllreduce, .count = args.count};
      SegmentRun run;
      run.start(seg.get(), args, buf.data(), buf.data(), 1, sig, {});
      const Deadline deadline = Deadline::after(5s);
      while (!run.done() && !deadline.expired()) run.progress();
      errors[r] = run.error() ? run.error()->what() : "no error";
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_NE(errors[0].find("rank 1"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("count"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("rank 0"), std::string::npos) << errors[1];
}

TEST(SegmentRun, WaitingForARankThatNeverComesSaysWhichRankAndRound) {
  auto outcomes = run(3, {{CollOp::kAllreduce, DataType::kF32, ReduceOp::kSum, 0, 3000, false}},
                      [](int rank, size_t) { return rank == 2; });
  EXPECT_NE(outcomes[0].error.find("rank 2 to arrive at round 1 of 3 of allreduce"), std::string::npos)
      << outcomes[0].error;
  EXPECT_NE(outcomes[0].error.find("over the collective segment"), std::string::npos)
      << outcomes[0].error;
}

// A flag rings exactly the sleepers it can unblock: arrive and reduced of round R the ranks
// still in R; done of R the ranks that want R's buffers back, two rounds on (a broadcast
// receiver can run that far ahead of a slower receiver). Before, done rang only ranks in R
// or earlier: the one rank waiting for it slept until its timeout.
TEST(CollectiveSegment, AFlagRingsTheSleepersItCanUnblock) {
  auto store = make_hash_store();
  std::vector<std::unique_ptr<CollectiveSegment>> segs(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      segs[r] = CollectiveSegment::attach(r, 2, *store, "seg", kSlot, Deadline::after(10s));
    });
  for (auto& t : threads) t.join();
  using Waiters = CollectiveSegment::Waiters;
  RankControl& peer = segs[1]->control(1);
  peer.sleeping.store(1);
  auto rings = [&](uint64_t peer_round, uint64_t round, Waiters waiters) {
    peer.active_round.store(peer_round);
    const uint32_t before = peer.bell.load();
    segs[0]->wake_sleepers(round, waiters);
    return peer.bell.load() != before;
  };
  EXPECT_TRUE(rings(5, 5, Waiters::kSameRound));
  EXPECT_FALSE(rings(6, 5, Waiters::kSameRound));
  EXPECT_FALSE(rings(kNoRound, 5, Waiters::kSameRound));
  EXPECT_TRUE(rings(7, 5, Waiters::kReuse));
  EXPECT_FALSE(rings(6, 5, Waiters::kReuse));
  EXPECT_FALSE(rings(5, 5, Waiters::kReuse));
  EXPECT_FALSE(rings(kNoRound, 5, Waiters::kReuse));
  // The rank asks not to be rung while a thread of it polls, and on lent time until the
  // grace ends. A driver whose grace was an old one was rung on every flag.
  peer.ring_after.store(kRingNever);
  EXPECT_FALSE(rings(5, 5, Waiters::kSameRound));
  peer.ring_after.store(Clock::now().time_since_epoch().count() + 60'000'000'000);
  EXPECT_FALSE(rings(5, 5, Waiters::kSameRound));
  peer.ring_after.store(Clock::now().time_since_epoch().count() - 1);
  EXPECT_TRUE(rings(5, 5, Waiters::kSameRound));
  peer.ring_after.store(kRingNow);
  EXPECT_TRUE(rings(5, 5, Waiters::kSameRound));  // nobody polls
  peer.sleeping.store(0);
  EXPECT_FALSE(rings(5, 5, Waiters::kSameRound));  // awake: it polls
}

TEST(SegmentRun, RoundsFollowFromTheShapeAlone) {
  CollArgs a;
  a.size = 4;
  a.count = 1024;
  EXPECT_EQ(SegmentRun::rounds_for(a, kSlot), 1u);
  a.count = 1025;
  EXPECT_EQ(SegmentRun::rounds_for(a, kSlot), 2u);
  a.count = 0;
  EXPECT_EQ(SegmentRun::rounds_for(a, kSlot), 1u);
  a.op = CollOp::kReduceScatter;
  a.count = 256;  // 1024 / 4 ranks per block and round
  EXPECT_EQ(SegmentRun::rounds_for(a, kSlot), 1u);
  a.count = 257;
  EXPECT_EQ(SegmentRun::rounds_for(a, kSlot), 2u);
  a.op = CollOp::kBarrier;
  EXPECT_EQ(SegmentRun::rounds_for(a, kSlot), 1u);
}

}  // namespace
}  // namespace plait::coll::segment
