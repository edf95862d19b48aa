// Every registered (op, algorithm) pair, swept over sizes, counts, roots, in place and out
// of place, chunked and not, and four (dtype, reduce op) flavours: the schedules must pass
// the checker's static checks (matching, bounds, races) and, run together on real buffers
// in random orders, produce what a reference computed straight from the inputs says.
// Inputs are integer-valued, so sums and products are exact in any order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <sstream>

#include "coll/schedule/builder.h"
#include "coll/schedule/check.h"
#include "coll/select/algorithms.h"
#include "core/reduce.h"
#include "plait/error.h"
#include "unit/coll/schedule_ancestors.h"

namespace plait::coll {
namespace {

struct Shape {
  CollOp op;
  Algorithm algo;
  int size;
  size_t count;
  int root;
  bool in_place;
  size_t chunk;
  int layout;  // v-variants: 0 packed in rank order with gaps, 1 reversed rank order
};

std::string text(const Shape& s) {
  std::ostringstream o;
  o << to_string(s.op) << "/" << to_string(s.algo) << " size=" << s.size << " count=" << s.count
    << " root=" << s.root << (s.in_place ? " in-place" : " out-of-place")
    << " chunk=" << s.chunk << " layout=" << s.layout;
  return o.str();
}

bool has_root(CollOp op) {
  return op == CollOp::kReduce || op == CollOp::kBroadcast || op == CollOp::kGather ||
         op == CollOp::kScatter;
}
bool reduces(CollOp op) {
  return op == CollOp::kAllreduce || op == CollOp::kReduce || op == CollOp::kReduceScatter ||
         op == CollOp::kReduceScatterv;
}

// Displacements for `counts`, one element of gap between blocks, in rank order or reversed.
std::vector<size_t> displs_for(const std::vector<size_t>& counts, int layout) {
  const size_t n = counts.size();
  std::vector<size_t> d(n);
  size_t at = 0;
  for (size_t k = 0; k < n; ++k) {
    const size_t p = layout == 1 ? n - 1 - k : k;
    d[p] = at;
    at += counts[p] + 1;
  }
  return d;
}

// Elements rank a sends rank b in alltoallv; symmetric in place, as the buffer is shared.
size_t a2a_count(const Shape& s, int a, int b) {
  if (s.count == 0) return 0;
  const int key = s.in_place ? a + b : a + 2 * b;
  return key % 5 == 4 ? 0 : s.count + static_cast<size_t>(key % 3);
}

std::vector<CollArgs> make_args(const Shape& s, DataType dt, ReduceOp rop) {
  std::vector<CollArgs> all;
  const size_t n = static_cast<size_t>(s.size);
  std::vector<size_t> counts(n);
  for (size_t p = 0; p < n; ++p) counts[p] = s.count == 0 || p % 4 == 2 ? 0 : s.count + p % 3;
  for (int r = 0; r < s.size; ++r) {
    CollArgs a;
    a.op = s.op;
    a.rank = r;
    a.size = s.size;
    a.dtype = dt;
    a.redop = rop;
    a.root = s.root;
    a.count = s.count;
    a.in_place = s.in_place;
    a.chunk_count = s.chunk;
    if (s.op == CollOp::kAllgatherv || s.op == CollOp::kReduceScatterv) {
      a.counts = counts;
      a.displs = displs_for(counts, s.layout);
    } else if (s.op == CollOp::kAlltoallv) {
      for (int p = 0; p < s.size; ++p) {
        a.send_counts.push_back(a2a_count(s, r, p));
        a.counts.push_back(a2a_count(s, p, r));
      }
      a.displs = displs_for(a.counts, s.layout);
      a.send_displs = s.in_place ? a.displs : displs_for(a.send_counts, 1 - s.layout);
    }
    all.push_back(std::move(a));
  }
  return all;
}

// Typed element access on byte buffers.
void put(DataType dt, std::byte* base, size_t i, int64_t v) {
  switch (dt) {
    case DataType::kF32: { float x = static_cast<float>(v); std::memcpy(base + 4 * i, &x, 4); break; }
    case DataType::kF64: { double x = static_cast<double>(v); std::memcpy(base + 8 * i, &x, 8); break; }
    case DataType::kI32: { int32_t x = static_cast<int32_t>(v); std::memcpy(base + 4 * i, &x, 4); break; }
    case DataType::kI64: std::memcpy(base + 8 * i, &v, 8); break;
    default: FAIL() << "dtype not used by this test";
  }
}
double get(DataType dt, const std::byte* base, size_t i) {
  switch (dt) {
    case DataType::kF32: { float x; std::memcpy(&x, base + 4 * i, 4); return x; }
    case DataType::kF64: { double x; std::memcpy(&x, base + 8 * i, 8); return x; }
    case DataType::kI32: { int32_t x; std::memcpy(&x, base + 4 * i, 4); return x; }
    case DataType::kI64: { int64_t x; std::memcpy(&x, base + 8 * i, 8); return static_cast<double>(x); }
    default: return 0;
  }
}

int64_t draw(DataType dt, ReduceOp rop, std::mt19937_64& rng) {
  if (rop == ReduceOp::kProd) {
    static const int64_t kFactors[] = {1, 1, 1, 2, -1};
    return kFactors[rng() % 5];
  }
  if (dt == DataType::kI64) return static_cast<int64_t>(rng() % 2000000000000ULL) - 1000000000000LL;
  if (dt == DataType::kI32) return static_cast<int64_t>(rng() % 2000001) - 1000000;
  return static_cast<int64_t>(rng() % 101) - 50;
}

struct Flavor {
  DataType dt;
  ReduceOp rop;
};
constexpr Flavor kFlavors[] = {{DataType::kF32, ReduceOp::kSum},
                               {DataType::kI32, ReduceOp::kMax},
                               {DataType::kF64, ReduceOp::kProd},
                               {DataType::kI64, ReduceOp::kSum}};

// Runs one shape in one flavour; returns an empty string or what went wrong.
std::string run_flavor(const Shape& s, const std::vector<CollArgs>& args,
                       const std::vector<Schedule>& scheds, uint64_t seed) {
  const DataType dt = args[0].dtype;
  const ReduceOp rop = args[0].redop;
  const size_t esz = dtype_size(dt);
  const int n = s.size;
  std::mt19937_64 rng(seed);
  std::vector<std::vector<std::byte>> input(n), buffer(n), separate_in(n);
  std::vector<RankBuffers> bufs(n);
  std::vector<BufferLayout> lay(n);
  for (int r = 0; r < n; ++r) {
    lay[r] = layout_of(args[r]);
    input[r].resize(lay[r].input_count * esz);
    for (size_t i = 0; i < lay[r].input_count; ++i) put(dt, input[r].data(), i, draw(dt, rop, rng));
    buffer[r].assign(lay[r].buffer_count() * esz, std::byte{0xA5});
    if (s.in_place) {
      std::copy(input[r].begin(), input[r].end(), buffer[r].begin() + lay[r].input_offset * esz);
    } else {
      separate_in[r] = input[r];
      bufs[r].input = separate_in[r];
    }
    bufs[r].output = buffer[r];
  }
  CheckOptions opt;
  opt.check_races = false;  // done once per shape by the caller
  opt.seed = seed;
  CheckResult res = check_schedules(args, scheds, bufs, opt);
  if (!res) return res.error;

  auto reduce_at = [&](auto offset_of) {  // reference: combine element offset_of(p) of each rank
    std::vector<std::byte> acc(esz), x(esz);
    for (int p = 0; p < n; ++p) {
      const std::byte* src = input[p].data() + offset_of(p) * esz;
      if (p == 0) std::memcpy(acc.data(), src, esz);
      else reduce_inplace(dt, rop, acc.data(), src, 1);
    }
    return get(dt, acc.data(), 0);
  };
  std::ostringstream err;
  int errors = 0;
  auto expect = [&](int r, size_t out_index, double want) {
    const double got = get(dt, buffer[r].data(), out_index);
    if (got != want && errors++ < 3) {
      err << "rank " << r << " out[" << out_index << "] = " << got << ", expected " << want << "; ";
    }
  };
  auto val = [&](int p, size_t i) { return get(dt, input[p].data(), i); };
  const std::vector<Range> rb = rank_blocks(args[0]);
  for (int r = 0; r < n; ++r) {
    const bool root = r == s.root;
    switch (s.op) {
      case CollOp::kAllreduce:
      case CollOp::kReduce:
        if (s.op == CollOp::kReduce && !root) break;
        for (size_t i = 0; i < s.count; ++i) expect(r, i, reduce_at([&](int) { return i; }));
        break;
      case CollOp::kBroadcast:
        for (size_t i = 0; i < s.count; ++i) expect(r, i, val(s.root, i));
        break;
      case CollOp::kAllgather:
      case CollOp::kAllgatherv:
      case CollOp::kGather:
        if (s.op == CollOp::kGather && !root) break;
        for (int p = 0; p < n; ++p) {
          for (size_t i = 0; i < rb[p].count; ++i) expect(r, rb[p].offset + i, val(p, i));
        }
        break;
      case CollOp::kReduceScatter:
      case CollOp::kReduceScatterv:
        for (size_t i = 0; i < rb[r].count; ++i) {
          expect(r, i, reduce_at([&](int) { return rb[r].offset + i; }));
        }
        break;
      case CollOp::kAlltoall:
      case CollOp::kAlltoallv: {
        const std::vector<Range> from = rank_blocks(args[r]);
        for (int p = 0; p < n; ++p) {
          const Range sent = send_blocks(args[p])[r];
          for (size_t i = 0; i < from[p].count; ++i) {
            expect(r, from[p].offset + i, val(p, sent.offset + i));
          }
        }
        break;
      }
      case CollOp::kScatter:
        for (size_t i = 0; i < s.count; ++i) expect(r, i, val(s.root, r * s.count + i));
        break;
      case CollOp::kBarrier: break;
    }
    if (!s.in_place && separate_in[r] != input[r]) err << "rank " << r << " input modified; ";
  }
  return err.str();
}

// "Nothing ordered that need not be": every dependency edge joins two steps that touch
// overlapping elements, at least one writing. Barriers and pairwise exchange order steps on
// purpose and are exempt; with `credits`, so is a send that waits for a receive from the
// same peer (a tree's window: chunk i + w goes up once chunk i has come down); and so is
// any edge of a token, a zero-element message (ScheduleBuilder::handshake).
std::string unneeded_dependency(const CollArgs& args, const Schedule& s, bool credits) {
  const BufferLayout layout = layout_of(args);
  auto uses = [&](const Step& st, std::vector<std::pair<Region, bool>>* u) {
    u->clear();
    if (st.kind != StepKind::kRecv) u->push_back({resolve(layout, st.src), st.kind == StepKind::kRecvReduce});
    if (st.kind != StepKind::kSend) u->push_back({resolve(layout, st.dst), true});
  };
  std::vector<std::pair<Region, bool>> a, b;
  for (StepId i = 0; i < s.steps.size(); ++i) {
    uses(s.steps[i], &a);
    auto token = [&](StepId x) {
      const Step& st = s.steps[x];
      return (st.kind == StepKind::kSend && st.src.count == 0) ||
             (st.kind == StepKind::kRecv && st.dst.count == 0);
    };
    for (StepId d : s.deps_of(s.steps[i])) {
      if (token(i) || token(d)) continue;
      if (credits && s.steps[i].kind == StepKind::kSend && s.steps[d].kind == StepKind::kRecv &&
          s.steps[d].peer == s.steps[i].peer)
        continue;
      uses(s.steps[d], &b);
      bool hazard = false;
      for (const auto& [ra, wa] : a) {
        for (const auto& [rb, wb] : b) hazard |= (wa || wb) && overlap(ra, rb);
      }
      if (!hazard) {
        return "rank " + std::to_string(args.rank) + " step " + std::to_string(i) + " (" +
               describe_step(s, i) + ") depends on step " + std::to_string(d) + " (" +
               describe_step(s, d) + ") without a data hazard";
      }
    }
  }
  return {};
}

// Builds, statically checks and runs one shape; reports failures through gtest.
void run_shape(const AlgorithmInfo& info, const Shape& s, int* shapes_run) {
  const bool flavors_matter = reduces(s.op);
  // Large shapes run one flavour (rotating with the shape); small ones all of them.
  const uint64_t base = std::hash<std::string>{}(text(s));
  const bool big = s.count * static_cast<size_t>(s.size) > 4096;
  const int n_flavors = big ? 1 : flavors_matter ? 4 : 2;
  // The schedule does not depend on the dtype, so build and race-check it once.
  std::vector<CollArgs> args = make_args(s, kFlavors[0].dt, kFlavors[0].rop);
  std::vector<Schedule> scheds;
  try {
    for (const CollArgs& a : args) scheds.push_back(info.build(a));
  } catch (const Error& e) {
    ADD_FAILURE() << text(s) << ": builder threw: " << e.what();
    return;
  }
  CheckResult v = validate_schedules(args, scheds, /*check_races=*/true);
  if (!v) {
    ADD_FAILURE() << text(s) << ": " << v.error;
    return;
  }
  const bool control_deps = s.op == CollOp::kBarrier ||
                            (s.algo == Algorithm::kRing &&
                             (s.op == CollOp::kAlltoall || s.op == CollOp::kAlltoallv));
  const bool credits = s.op == CollOp::kAllreduce && (s.algo == Algorithm::kBinomialTree ||
                                                      s.algo == Algorithm::kDoubleBinaryTree);
  for (size_t r = 0; r < scheds.size() && !control_deps; ++r) {
    std::string err = unneeded_dependency(args[r], scheds[r], credits);
    if (!err.empty()) {
      ADD_FAILURE() << text(s) << ": " << err;
      return;
    }
  }
  ++*shapes_run;
  for (int f = 0; f < n_flavors; ++f) {
    const int pick = big ? static_cast<int>(base % 4) : f;
    const Flavor fl = flavors_matter ? kFlavors[pick] : kFlavors[pick % 2 == 0 ? 0 : 3];
    for (CollArgs& a : args) {
      a.dtype = fl.dt;
      a.redop = fl.rop;
    }
    const uint64_t seed = base + static_cast<uint64_t>(f);
    std::string err = run_flavor(s, args, scheds, seed);
    if (!err.empty()) {
      ADD_FAILURE() << text(s) << " " << to_string(fl.dt) << "/" << to_string(fl.rop)
                    << " seed=" << seed << ": " << err;
      return;
    }
  }
}

class Sweep : public ::testing::TestWithParam<AlgorithmInfo> {};

TEST_P(Sweep, MatchesReference) {
  const AlgorithmInfo& info = GetParam();
  const bool v_variant = info.op == CollOp::kAllgatherv || info.op == CollOp::kReduceScatterv ||
                         info.op == CollOp::kAlltoallv;
  const bool vector_op = info.op == CollOp::kAllreduce || info.op == CollOp::kReduce ||
                         info.op == CollOp::kBroadcast;
  int shapes = 0;
  for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16}) {
    std::set<size_t> counts = {0, 1, 2, 7, static_cast<size_t>(n - 1), 1023};
    if (n == 7 || n == 16) counts.insert(4099);
    std::set<int> roots = {0};
    if (has_root(info.op)) roots = {0, n - 1, n / 2};
    for (size_t count : counts) {
      for (int root : roots) {
        for (bool in_place : {false, true}) {
          for (size_t chunk : {size_t{0}, size_t{3}}) {
            // The big count is a cost, once per n is plenty; chunked by 3 only where count is
            // the whole vector (not one rank's block of n).
            if (count == 4099 && (in_place || root != 0 || (chunk && !vector_op))) continue;
            Shape s{info.op, info.algorithm, n, count, root, in_place, chunk,
                    static_cast<int>(count % 2)};
            run_shape(info, s, &shapes);
            if (v_variant && count > 2 && count <= 7) {
              s.layout = 1 - s.layout;
              run_shape(info, s, &shapes);
            }
            if (HasFailure()) return;
          }
        }
      }
    }
  }
  RecordProperty("shapes", shapes);
}

// Bigger groups, just past and at a power of two, for the fold and tree edge cases.
TEST_P(Sweep, LargerGroups) {
  const AlgorithmInfo& info = GetParam();
  int shapes = 0;
  for (int n : {31, 32, 33}) {
    for (size_t count : {size_t{1}, size_t{40}}) {
      for (bool in_place : {false, true}) {
        const int root = has_root(info.op) ? n - 2 : 0;
        run_shape(info, {info.op, info.algorithm, n, count, root, in_place, count / 8, 0},
                  &shapes);
        if (HasFailure()) return;
      }
    }
  }
}

std::string row_name(const ::testing::TestParamInfo<AlgorithmInfo>& p) {
  return std::string(to_string(p.param.op)) + "_" + std::string(to_string(p.param.algorithm));
}

// The rows that build schedules (all but the shm algorithm, which segment_run_test covers).
std::vector<AlgorithmInfo> schedule_rows() {
  std::vector<AlgorithmInfo> rows;
  for (const AlgorithmInfo& info : all_algorithms())
    if (info.build != nullptr) rows.push_back(info);
  return rows;
}

INSTANTIATE_TEST_SUITE_P(AlgorithmRegistry, Sweep, ::testing::ValuesIn(schedule_rows()),
                         row_name);

// ---- registry and cost model ----

Algorithm cheapest(CollOp op, int size, size_t bytes) {
  CollArgs a;
  a.op = op;
  a.size = size;
  a.dtype = DataType::kU8;
  a.count = bytes;
  CostParams p;
  Algorithm best = Algorithm::kAuto;
  double best_cost = std::numeric_limits<double>::infinity();
  for (Algorithm algo : algorithms_for(op)) {
    const AlgorithmInfo* info = find_algorithm(op, algo);
    if (info->applies && !info->applies(a)) continue;
    const double c = info->cost(a, p);
    if (c < best_cost) {
      best_cost = c;
      best = algo;
    }
  }
  return best;
}

TEST(AlgorithmRegistry, EveryRowIsFindableAndUnique) {
  std::set<std::pair<CollOp, Algorithm>> seen;
  for (const AlgorithmInfo& info : all_algorithms()) {
    EXPECT_TRUE(seen.insert({info.op, info.algorithm}).second) << row_name({info, 0});
    EXPECT_EQ(find_algorithm(info.op, info.algorithm), &info);
    // Every algorithm is a schedule but the shm one, which runs on the collective segment.
    EXPECT_EQ(info.build == nullptr, info.algorithm == Algorithm::kShm) << row_name({info, 0});
    ASSERT_NE(info.cost, nullptr);
  }
  EXPECT_EQ(find_algorithm(CollOp::kBarrier, Algorithm::kRing), nullptr);
  EXPECT_EQ(algorithms_for(CollOp::kAllreduce).size(), 9u);
  EXPECT_EQ(all_algorithms().size(), 47u);
}

TEST(AlgorithmRegistry, CostsArePositiveAndGrowWithSize) {
  for (const AlgorithmInfo& info : all_algorithms()) {
    for (int n : {2, 3, 8, 64}) {
      CollArgs a;
      a.op = info.op;
      a.size = n;
      a.count = 1000;
      a.segment_slot_bytes = 64 << 10;
      const double small = info.cost(a, {});
      a.count = 1000000;
      const double big = info.cost(a, {});
      EXPECT_GT(small, 0) << row_name({info, 0}) << " n=" << n;
      if (info.op != CollOp::kBarrier) {
        EXPECT_GT(big, small) << row_name({info, 0}) << " n=" << n;
      }
    }
  }
}

TEST(AlgorithmCostModel, PicksLatencyOptimalForEightBytes) {
  EXPECT_EQ(cheapest(CollOp::kAllreduce, 8, 8), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(cheapest(CollOp::kBroadcast, 8, 8), Algorithm::kBinomialTree);
  EXPECT_EQ(cheapest(CollOp::kReduce, 8, 8), Algorithm::kBinomialTree);
  EXPECT_EQ(cheapest(CollOp::kAllgather, 8, 8), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(cheapest(CollOp::kReduceScatter, 8, 8), Algorithm::kHalvingDoubling);
  EXPECT_EQ(cheapest(CollOp::kBarrier, 8, 0), Algorithm::kRecursiveDoubling);
}

TEST(AlgorithmCostModel, PicksBandwidthOptimalForSixtyFourMiB) {
  const size_t m = size_t{64} << 20;
  const std::set<Algorithm> bandwidth = {Algorithm::kRing, Algorithm::kHalvingDoubling};
  EXPECT_TRUE(bandwidth.count(cheapest(CollOp::kAllreduce, 8, m)));
  EXPECT_TRUE(bandwidth.count(cheapest(CollOp::kReduce, 8, m)));
  EXPECT_TRUE(bandwidth.count(cheapest(CollOp::kBroadcast, 8, m)));
  EXPECT_TRUE(bandwidth.count(cheapest(CollOp::kReduceScatter, 8, m / 8)));
  // Non-power-of-two: the fold costs halving-doubling two extra full-vector steps.
  EXPECT_EQ(cheapest(CollOp::kAllreduce, 7, m), Algorithm::kRing);
}

// ---- properties of particular builders ----

TEST(AlgorithmPipelining, RingForwardsChunkBeforeBlockIsComplete) {
  CollArgs a;
  a.op = CollOp::kAllreduce;
  a.size = 4;
  a.rank = 1;
  a.count = 4 * 64;
  a.chunk_count = 16;  // 4 chunks per block
  for (bool in_place : {false, true}) {
    a.in_place = in_place;
    Schedule s = find_algorithm(a.op, Algorithm::kRing)->build(a);
    std::vector<StepId> sends, recvs;
    for (StepId i = 0; i < s.steps.size(); ++i) {
      if (s.steps[i].kind == StepKind::kSend) sends.push_back(i);
      if (s.steps[i].kind == StepKind::kRecv || s.steps[i].kind == StepKind::kRecvReduce) {
        recvs.push_back(i);
      }
    }
    ASSERT_GE(sends.size(), 8u);
    // Step 1's first chunk needs step 0's first received chunk, not its last one.
    const std::set<StepId> anc = ancestors(s, sends[4]);
    EXPECT_TRUE(anc.count(recvs[0])) << "in_place=" << in_place;
    EXPECT_FALSE(anc.count(recvs[3])) << "in_place=" << in_place;
    // Step 0 depends on nothing: all its chunks can go at once.
    for (int k = 0; k < 4; ++k) EXPECT_EQ(s.steps[sends[k]].dep_count, 0u);
  }
}

TEST(AlgorithmBuilders, RejectBadArguments) {
  CollArgs a;
  a.op = CollOp::kAllgatherv;
  a.size = 3;
  a.counts = {1, 2};  // one short
  a.displs = {0, 1, 3};
  EXPECT_THROW(find_algorithm(a.op, Algorithm::kRing)->build(a), Error);
  a.op = CollOp::kBroadcast;
  a.root = 3;
  EXPECT_THROW(find_algorithm(a.op, Algorithm::kNaive)->build(a), Error);
}

TEST(AlgorithmBuilders, OutOfPlaceRingAllreduceNeedsNoScratch) {
  CollArgs a;
  a.op = CollOp::kAllreduce;
  a.size = 5;
  a.rank = 2;
  a.count = 1000;
  EXPECT_EQ(find_algorithm(a.op, Algorithm::kRing)->build(a).scratch_count, 0u);
  a.in_place = true;  // two staging blocks for the fused receive-reduce
  EXPECT_EQ(find_algorithm(a.op, Algorithm::kRing)->build(a).scratch_count, 2u * 200u);
}

}  // namespace
}  // namespace plait::coll
