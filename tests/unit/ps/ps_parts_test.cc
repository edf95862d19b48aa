// The parameter server's pieces that need no peers: partitioning and placement, the slot
// ring's credits and wrap-around, and the update rules against a scalar reference.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/half.h"
#include "ps/key_table.h"
#include "ps/partition.h"
#include "ps/slot_ring.h"
#include "ps/update_kernels.h"
#include "ps/wire.h"

namespace plait::ps {
namespace {

TEST(PsPartition, SmallKeysAreOnePartitionPlacedByHash) {
  PartitionTable t(4, 4 << 20, 256 << 10);
  std::vector<int> per_server(4, 0);
  for (uint64_t key = 0; key < 400; ++key) {
    auto ids = t.add(key, 1000, DataType::kF32);
    ASSERT_EQ(ids.size(), 1u);
    EXPECT_EQ(t[ids[0]].server, hash_server(key, 4));
    EXPECT_EQ(t[ids[0]].count, 1000u);
    per_server[t[ids[0]].server] += 1;
  }
  // Consecutive keys spread: every server gets a fair share (expected 100 each).
  for (int n : per_server) EXPECT_GT(n, 60);
}

TEST(PsPartition, LargeKeysSplitIntoBoundedRangesBalancedByBytes) {
  for (size_t part_bytes : {size_t{4096}, size_t{1} << 20, size_t{4} << 20}) {
    for (int servers : {1, 2, 3, 4}) {
      const size_t chunk = std::min(part_bytes, size_t{256} << 10);
      PartitionTable t(servers, part_bytes, chunk);
      for (size_t count : {size_t{1}, size_t{1023}, size_t{1024}, size_t{1025}, size_t{300001},
                           size_t{16} << 20}) {
        for (DataType dtype : {DataType::kF32, DataType::kF16, DataType::kF64}) {
          auto ids = t.add(count * 7 + static_cast<uint64_t>(dtype) + part_bytes, count, dtype);
          size_t next = 0;
          for (uint32_t id : ids) {
            const Partition& p = t[id];
            EXPECT_EQ(p.first, next) << "chunks are contiguous and in order";
            EXPECT_GT(p.count, 0u);
            EXPECT_LE(p.bytes(dtype), chunk) << "a chunk fits its ring slot";
            next += p.count;
            EXPECT_EQ(t.on_server(p.server)[p.local], id);
          }
          EXPECT_EQ(next, count);
        }
      }
      // Balanced by bytes: the large keys dominate and spread evenly.
      const auto& load = t.load();
      const size_t hi = *std::max_element(load.begin(), load.end());
      const size_t lo = *std::min_element(load.begin(), load.end());
      EXPECT_LE(hi - lo, part_bytes + (part_bytes >> 1)) << servers << " servers, " << part_bytes;
    }
  }
}

TEST(PsPartition, PartitionsArePlacedWholeAndMovedInChunks) {
  // 100 MB in 4 MiB partitions over 4 servers: 24 partitions, 6 per server, each cut into 16
  // chunks of 256 KiB (the last ones a little smaller).
  PartitionTable t(4, 4 << 20, 256 << 10);
  auto ids = t.add(1, 25'000'000, DataType::kF32);
  for (size_t load : t.load()) EXPECT_NEAR(static_cast<double>(load), 25e6, 64);
  std::vector<size_t> chunks(4, 0);
  for (uint32_t id : ids) chunks[t[id].server] += 1;
  for (size_t c : chunks) EXPECT_EQ(c, 6u * 16u);
}

TEST(PsPartition, TheSameRegistrationsGiveTheSameTable) {
  PartitionTable a(3, 65536, 16384), b(3, 65536, 16384);
  for (uint64_t k = 0; k < 50; ++k) {
    EXPECT_EQ(a.add(k, 1000 + k * 9000, DataType::kF32), b.add(k, 1000 + k * 9000, DataType::kF32));
  }
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[static_cast<uint32_t>(i)].server, b[static_cast<uint32_t>(i)].server);
}

TEST(PsKeyTable, RefusesDuplicatesEmptyKeysAndOptimizersOnIntegers) {
  KeyTable t(2, 4096, 4096);
  t.add({.key = 1, .count = 10, .dtype = DataType::kF32}, 0);
  EXPECT_THROW(t.add({.key = 1, .count = 10, .dtype = DataType::kF32}, 0), Error);
  EXPECT_THROW(t.add({.key = 2, .count = 0, .dtype = DataType::kF32}, 0), Error);
  KeySpec adam_int{.key = 3, .count = 10, .dtype = DataType::kI32};
  adam_int.options.update.rule = Rule::kAdam;
  EXPECT_THROW(t.add(adam_int, 0), Error);
  KeySpec sum_int{.key = 4, .count = 10, .dtype = DataType::kI32};
  EXPECT_NO_THROW(t.add(sum_int, 0));
  ASSERT_NE(t.find(1), nullptr);
  EXPECT_EQ(t.find(99), nullptr);
}

TEST(PsSlotRing, WrapsAroundInOrderAndNeverHandsOutAHeldSlot) {
  SlotRing ring(4);
  // In-order consumption: exactly the ring's wrap-around.
  std::vector<uint32_t> taken;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 4; ++i) {
      ASSERT_FALSE(ring.empty());
      taken.push_back(ring.take());
    }
    EXPECT_TRUE(ring.empty()) << "no credit, no slot";
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(ring.give_back(taken[taken.size() - 4 + i]));
  }
  for (size_t i = 0; i < taken.size(); ++i) EXPECT_EQ(taken[i], i % 4);
  // Out of order: slot 0 held (a push kept for a later round) while 1..3 come back.
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(ring.take(), i);
  EXPECT_TRUE(ring.give_back(2));
  EXPECT_TRUE(ring.give_back(1));
  EXPECT_EQ(ring.take(), 2u);
  EXPECT_EQ(ring.take(), 1u);
  EXPECT_TRUE(ring.empty()) << "slots 0 and 3 are still held";
  // A credit for a slot not taken, or out of range, is refused.
  EXPECT_FALSE(ring.give_back(7));
  EXPECT_TRUE(ring.give_back(0));
  EXPECT_FALSE(ring.give_back(0));
  EXPECT_EQ(ring.available(), 1u);
}

// The scalar reference of one rule, in double.
void reference(const Update& u, std::vector<double>& w, std::vector<double>& m, std::vector<double>& v,
               const std::vector<double>& g, uint64_t step) {
  for (size_t i = 0; i < w.size(); ++i) {
    const double d = g[i] + u.weight_decay * w[i];
    switch (u.rule) {
      case Rule::kSum:
      case Rule::kMean: w[i] += g[i]; break;
      case Rule::kSgd: w[i] -= u.lr * d; break;
      case Rule::kMomentum:
        m[i] = step == 1 ? d : u.momentum * m[i] + d;
        w[i] -= u.lr * m[i];
        break;
      case Rule::kAdam: {
        m[i] = u.beta1 * m[i] + (1 - u.beta1) * d;
        v[i] = u.beta2 * v[i] + (1 - u.beta2) * d * d;
        const double bc1 = 1 - std::pow(u.beta1, step), bc2 = 1 - std::pow(u.beta2, step);
        w[i] -= u.lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + u.eps);
        break;
      }
    }
  }
}

// A pull reply's immediate is the version's low 32 bits; the worker restores the rest from
// its clock. With backup workers the version runs ahead of a slow worker's clock (clock 1,
// version 3 once came back as 1 - (2^32 - 2), about 1.8e19).
TEST(PsWire, TheVersionIsRestoredBehindOrAheadOfTheClock) {
  const uint64_t wrap = uint64_t{1} << 32;
  EXPECT_EQ(wire::version_near(1, 3), 3u);
  EXPECT_EQ(wire::version_near(10, 7), 7u);
  EXPECT_EQ(wire::version_near(0, 0), 0u);
  EXPECT_EQ(wire::version_near(wrap + 5, 3), wrap + 3);       // behind, across a wrap
  EXPECT_EQ(wire::version_near(wrap - 1, 2), wrap + 2);       // ahead, across a wrap
  EXPECT_EQ(wire::version_near(5 * wrap + 9, 9), 5 * wrap + 9);
  EXPECT_EQ(wire::version_near(1, 0xffffffffu), 0xffffffffu);  // never below 0
  for (uint64_t clock : {uint64_t{0}, uint64_t{1}, wrap - 3, wrap, 7 * wrap + 12345})
    for (int64_t d : {-1000, -1, 0, 1, 2, 1000, 1 << 30})
      if (static_cast<int64_t>(clock) + d >= 0) {
        const uint64_t v = clock + static_cast<uint64_t>(d);
        EXPECT_EQ(wire::version_near(clock, static_cast<uint32_t>(v)), v) << clock << " " << d;
      }
}

TEST(PsUpdate, EveryRuleMatchesTheScalarReference) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> dist(-2, 2);
  for (Rule rule : {Rule::kSum, Rule::kSgd, Rule::kMomentum, Rule::kAdam}) {
    for (DataType dtype : {DataType::kF32, DataType::kF64}) {
      for (size_t n : {size_t{1}, size_t{7}, size_t{64}, size_t{1001}}) {
        Update u{.rule = rule, .lr = 0.05f, .momentum = 0.8f, .weight_decay = 0.01f};
        std::vector<double> w(n), m(n, 0), v(n, 0), g(n);
        for (double& x : w) x = dist(rng);
        const size_t es = dtype_size(dtype);
        std::vector<uint8_t> W(n * es), G(n * es), M(n * es, 0), V(n * es, 0);
        auto put = [&](std::vector<uint8_t>& dst, const std::vector<double>& src) {
          for (size_t i = 0; i < n; ++i) {
            if (dtype == DataType::kF32) {
              float f = static_cast<float>(src[i]);
              std::memcpy(&dst[i * 4], &f, 4);
            } else {
              std::memcpy(&dst[i * 8], &src[i], 8);
            }
          }
        };
        auto get = [&](const std::vector<uint8_t>& src, size_t i) {
          if (dtype == DataType::kF32) {
            float f;
            std::memcpy(&f, &src[i * 4], 4);
            return static_cast<double>(f);
          }
          double d;
          std::memcpy(&d, &src[i * 8], 8);
          return d;
        };
        put(W, w);
        if (dtype == DataType::kF32)  // the reference starts from the same rounded values
          for (size_t i = 0; i < n; ++i) w[i] = get(W, i);
        for (uint64_t step = 1; step <= 4; ++step) {
          for (double& x : g) x = dist(rng);
          put(G, g);
          if (dtype == DataType::kF32)
            for (size_t i = 0; i < n; ++i) g[i] = get(G, i);
          apply_rule(dtype, u, W.data(), G.data(), {M.data(), V.data()}, n, step);
          reference(u, w, m, v, g, step);
        }
        const double rel = dtype == DataType::kF32 ? 1e-5 : 1e-13;
        for (size_t i = 0; i < n; ++i)
          ASSERT_NEAR(get(W, i), w[i], rel * (1 + std::fabs(w[i])))
              << to_string(rule) << " " << to_string(dtype) << " n=" << n << " i=" << i;
      }
    }
  }
}

TEST(PsUpdate, HalfKeysAccumulateInFloatAndRoundOnce) {
  const size_t n = 100;
  std::vector<uint16_t> a(n), b(n), out(n);
  std::vector<float> acc(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = float_to_half(0.1f * static_cast<float>(i));
    b[i] = float_to_half(1000.0f + static_cast<float>(i));
  }
  load_into(DataType::kF16, acc.data(), a.data(), n);
  add_into(DataType::kF16, acc.data(), b.data(), n);
  store_from(DataType::kF16, out.data(), acc.data(), n);
  for (size_t i = 0; i < n; ++i) {
    const float want = half_to_float(a[i]) + half_to_float(b[i]);
    EXPECT_EQ(acc[i], want);
    EXPECT_EQ(out[i], float_to_half(want));
  }
  // bf16 holds integers up to 256 exactly: 3i for i < 86.
  const size_t nb = 85;
  std::vector<uint16_t> bf(nb), bf_out(nb);
  for (size_t i = 0; i < nb; ++i) bf[i] = float_to_bf16(static_cast<float>(i) * 3.0f);
  load_into(DataType::kBF16, acc.data(), bf.data(), nb);
  divide(DataType::kBF16, acc.data(), nb, 3);
  store_from(DataType::kBF16, bf_out.data(), acc.data(), nb);
  for (size_t i = 0; i < nb; ++i) EXPECT_EQ(bf16_to_float(bf_out[i]), static_cast<float>(i));
}

}  // namespace
}  // namespace plait::ps
