// The double binary tree and hierarchical allreduces: the trees' shape (every rank a leaf in
// one tree, depth ~log2 n), checker runs over sizes 1..17 and, for the hierarchy, over host
// layouts (one host, contiguous, interleaved, uneven, one rank per host, unsorted labels),
// what crosses hosts, pipelining, and the cost model's choice on a slow inter-host link.
// Inputs are integer-valued, so every reduction order gives exact results.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <sstream>

#include "coll/schedule/binary_tree.h"
#include "coll/schedule/builder.h"
#include "coll/schedule/check.h"
#include "coll/schedule/hosts.h"
#include "coll/schedule/phases.h"
#include "coll/select/algorithms.h"
#include "coll/select/select.h"
#include "core/reduce.h"
#include "plait/error.h"
#include "unit/coll/schedule_ancestors.h"

namespace plait::coll {
namespace {

// ---- tree shape ----

struct TreeStats {
  int roots = 0;
  int depth = 0;
  std::vector<bool> interior;
};

// Checks that tree t of the double binary tree over n ranks is a tree (one root, parent and
// child links agree, at most two children, every rank reaches the root) and measures it.
TreeStats check_tree(int n, int t) {
  TreeStats st;
  st.interior.assign(static_cast<size_t>(n), false);
  std::vector<TreeLinks> node;
  for (int r = 0; r < n; ++r) node.push_back(double_binary_tree(n, r)[static_cast<size_t>(t)]);
  for (int r = 0; r < n; ++r) {
    const TreeLinks& x = node[static_cast<size_t>(r)];
    EXPECT_LE(x.children.size(), 2u) << "n=" << n << " tree " << t << " rank " << r;
    st.interior[static_cast<size_t>(r)] = !x.children.empty();
    if (x.parent < 0) {
      ++st.roots;
    } else {
      EXPECT_LT(x.parent, n);
      const auto& pc = node[static_cast<size_t>(x.parent)].children;
      EXPECT_EQ(std::count(pc.begin(), pc.end(), r), 1)
          << "n=" << n << " tree " << t << ": " << x.parent << " does not list child " << r;
    }
    for (int c : x.children) EXPECT_EQ(node[static_cast<size_t>(c)].parent, r);
    int depth = 0;
    for (int at = r; node[static_cast<size_t>(at)].parent >= 0 && depth <= n;) {
      at = node[static_cast<size_t>(at)].parent;
      ++depth;
    }
    EXPECT_LE(depth, n) << "n=" << n << " tree " << t << ": cycle above rank " << r;
    st.depth = std::max(st.depth, depth);
  }
  return st;
}

TEST(DoubleBinaryTree, TwoTreesOfLogDepthWithComplementaryInteriors) {
  for (int n = 1; n <= 70; ++n) {
    const TreeStats a = check_tree(n, 0), b = check_tree(n, 1);
    EXPECT_EQ(a.roots, 1) << "n=" << n;
    EXPECT_EQ(b.roots, 1) << "n=" << n;
    EXPECT_LE(a.depth, ceil_log2(n)) << "n=" << n;
    EXPECT_LE(b.depth, ceil_log2(n)) << "n=" << n;
    EXPECT_GE(a.depth, static_cast<int>(std::floor(std::log2(n)))) << "n=" << n;
    int both = 0;
    for (int r = 0; r < n; ++r) both += a.interior[r] && b.interior[r];
    // Even n: every rank is interior in at most one tree. Odd n: one rank can't avoid it.
    EXPECT_EQ(both, n % 2 == 0 || n == 1 ? 0 : 1) << "n=" << n;
    if (n >= 2) {
      EXPECT_EQ(double_binary_tree(n, 0)[0].parent, -1);
      EXPECT_NE(double_binary_tree(n, 0)[1].parent, -1) << "the roots differ";
    }
  }
}

TEST(DoubleBinaryTree, InorderShapeOfEightRanks) {
  // 0 - 4, 4 - {2, 6}, 2 - {1, 3}, 6 - {5, 7}: odd positions are the leaves.
  EXPECT_EQ(inorder_btree(8, 0).children, std::vector<int>({4}));
  EXPECT_EQ(inorder_btree(8, 4).children, std::vector<int>({2, 6}));
  EXPECT_EQ(inorder_btree(8, 6).children, std::vector<int>({5, 7}));
  EXPECT_EQ(inorder_btree(8, 7).parent, 6);
  EXPECT_TRUE(inorder_btree(8, 7).children.empty());
  // Past the end (n = 14): 12's right child would be 14, so it is 13, whose own parent,
  // 14, does not exist either.
  EXPECT_EQ(inorder_btree(14, 12).children, std::vector<int>({10, 13}));
  EXPECT_EQ(inorder_btree(14, 13).parent, 12);
}

// ---- checker runs ----

struct Flavor { DataType dt; ReduceOp rop; };
constexpr Flavor kFlavors[] = {{DataType::kF32, ReduceOp::kSum},
                               {DataType::kI32, ReduceOp::kMax},
                               {DataType::kF64, ReduceOp::kProd},
                               {DataType::kI64, ReduceOp::kSum}};

void put(DataType dt, std::byte* base, size_t i, int64_t v) {
  switch (dt) {
    case DataType::kF32: { float x = static_cast<float>(v); std::memcpy(base + 4 * i, &x, 4); break; }
    case DataType::kF64: { double x = static_cast<double>(v); std::memcpy(base + 8 * i, &x, 8); break; }
    case DataType::kI32: { int32_t x = static_cast<int32_t>(v); std::memcpy(base + 4 * i, &x, 4); break; }
    default: std::memcpy(base + 8 * i, &v, 8); break;
  }
}

struct Case {
  Algorithm algo;
  int size;
  size_t count;
  bool in_place;
  size_t chunk;
  std::vector<int> host_of;
};

std::string text(const Case& c) {
  std::ostringstream o;
  o << to_string(c.algo) << " size=" << c.size << " count=" << c.count
    << (c.in_place ? " in-place" : " out-of-place") << " chunk=" << c.chunk << " host_of={";
  for (size_t i = 0; i < c.host_of.size(); ++i) o << (i ? "," : "") << c.host_of[i];
  o << "}";
  return o.str();
}

std::vector<CollArgs> make_args(const Case& c) {
  std::vector<CollArgs> all;
  for (int r = 0; r < c.size; ++r) {
    CollArgs a;
    a.op = CollOp::kAllreduce;
    a.rank = r;
    a.size = c.size;
    a.count = c.count;
    a.in_place = c.in_place;
    a.chunk_count = c.chunk;
    a.host_of = c.host_of;
    all.push_back(std::move(a));
  }
  return all;
}

using Build = std::function<Schedule(const CollArgs&)>;

// Builds (with the registered builder unless `build` is given), race-checks and runs one
// case in `flavors` flavours; returns "" or what failed.
std::string run_case(const Case& c, int flavors, Build build = nullptr) {
  std::vector<CollArgs> args = make_args(c);
  if (!build) build = find_algorithm(CollOp::kAllreduce, c.algo)->build;
  std::vector<Schedule> scheds;
  try {
    for (const CollArgs& a : args) scheds.push_back(build(a));
  } catch (const Error& e) {
    return text(c) + ": builder threw: " + e.what();
  }
  CheckResult v = validate_schedules(args, scheds, /*check_races=*/true);
  if (!v) return text(c) + ": " + v.error;
  const uint64_t base = std::hash<std::string>{}(text(c));
  for (int f = 0; f < flavors; ++f) {
    const Flavor fl = kFlavors[(base + static_cast<uint64_t>(f)) % 4];
    const size_t esz = dtype_size(fl.dt);
    for (CollArgs& a : args) {
      a.dtype = fl.dt;
      a.redop = fl.rop;
    }
    std::mt19937_64 rng(base + f);
    std::vector<std::vector<std::byte>> input(c.size), output(c.size), in_copy(c.size);
    std::vector<RankBuffers> bufs(c.size);
    for (int r = 0; r < c.size; ++r) {
      input[r].resize(c.count * esz);
      for (size_t i = 0; i < c.count; ++i) {
        // Products of 1, 2 and -1 stay exact across 17 ranks.
        static constexpr int64_t kFactors[] = {1, 1, 1, 2, -1};
        const int64_t v = fl.rop == ReduceOp::kProd ? kFactors[rng() % 5]
                                                    : static_cast<int64_t>(rng() % 201) - 100;
        put(fl.dt, input[r].data(), i, v);
      }
      output[r] = c.in_place ? input[r] : std::vector<std::byte>(c.count * esz, std::byte{0xA5});
      in_copy[r] = input[r];
      bufs[r].output = output[r];
      if (!c.in_place) bufs[r].input = in_copy[r];
    }
    CheckOptions opt;
    opt.check_races = false;  // done above, once per case
    opt.seed = base + f;
    CheckResult res = check_schedules(args, scheds, bufs, opt);
    if (!res) return text(c) + " seed=" + std::to_string(opt.seed) + ": " + res.error;
    std::vector<std::byte> want = input[0];
    for (int r = 1; r < c.size; ++r) {
      reduce_inplace(fl.dt, fl.rop, want.data(), input[r].data(), c.count);
    }
    for (int r = 0; r < c.size; ++r) {
      if (output[r] != want) {
        return text(c) + " " + std::string(to_string(fl.dt)) + "/" +
               std::string(to_string(fl.rop)) + ": rank " + std::to_string(r) + " is wrong";
      }
      if (!c.in_place && in_copy[r] != input[r]) return text(c) + ": input modified";
    }
  }
  return {};
}

std::vector<size_t> counts_for(int n) { return {0, 1, 2, 7, static_cast<size_t>(2 * n + 1), 61}; }

TEST(DoubleBinaryTree, CheckerSweep) {
  for (int n = 1; n <= 17; ++n) {
    for (size_t count : counts_for(n)) {
      for (bool in_place : {false, true}) {
        for (size_t chunk : {size_t{0}, size_t{1}, size_t{3}}) {
          const std::string err =
              run_case({Algorithm::kDoubleBinaryTree, n, count, in_place, chunk, {}}, 2);
          ASSERT_TRUE(err.empty()) << err;
        }
      }
    }
  }
  // Larger and at powers of two, chunked: deeper trees, longer pipelines.
  for (int n : {31, 32, 33, 64}) {
    const std::string err =
        run_case({Algorithm::kDoubleBinaryTree, n, 300, n % 2 == 1, 16, {}}, 1);
    ASSERT_TRUE(err.empty()) << err;
  }
}

// Host layouts for n ranks, each labelled with how it places ranks.
std::vector<std::vector<int>> layouts_for(int n) {
  std::vector<std::vector<int>> out = {{}};  // one host, implicitly
  auto make = [&](auto host) {
    std::vector<int> v(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) v[static_cast<size_t>(r)] = host(r);
    out.push_back(std::move(v));
  };
  make([](int) { return 3; });                      // one host, explicitly
  if (n < 2) return out;
  make([&](int r) { return r < (n + 1) / 2 ? 0 : 1; });  // two contiguous hosts
  make([](int r) { return r % 2; });                // interleaved {0,1,0,1,...}
  make([&](int r) { return r == n - 1 ? 1 : 0; });  // uneven {0,0,0,1}
  make([](int r) { return r; });                    // one rank per host
  if (n < 3) return out;
  make([](int r) { return r / 3; });                // hosts of three, the last maybe short
  make([](int r) { return (r * 7 % 3) * 5 + 2; });  // three unsorted, sparse labels
  make([](int r) { return r == 0 ? 9 : 4; });       // a lone rank on the higher label
  return out;
}

void hierarchical_sweep(int lo, int hi) {
  for (int n = lo; n <= hi; ++n) {
    for (const std::vector<int>& hosts : layouts_for(n)) {
      for (size_t count : counts_for(n)) {
        for (bool in_place : {false, true}) {
          for (size_t chunk : {size_t{0}, size_t{2}}) {
            const std::string err =
                run_case({Algorithm::kHierarchical, n, count, in_place, chunk, hosts}, 1);
            ASSERT_TRUE(err.empty()) << err;
          }
        }
      }
    }
  }
}

TEST(Hierarchical, CheckerSweepUpToNine) { hierarchical_sweep(1, 9); }
TEST(Hierarchical, CheckerSweepTenToSeventeen) { hierarchical_sweep(10, 17); }

TEST(Hierarchical, LargeShardsUseTheRingAcrossHosts) {
  // Shards large enough that the ring wins across hosts; small ones take recursive doubling.
  CollArgs probe;
  ASSERT_FALSE(hierarchical_inter_ring(probe, 8, 1));
  struct Big { std::vector<int> hosts; size_t count; };
  const Big cases[] = {
      {{0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7}, size_t{1} << 20},  // 8 hosts of 2
      {{0, 0, 0, 1, 1, 2}, 300007},                                         // uneven, odd count
      {{2, 0, 1, 2, 0, 1, 2, 0, 1}, 250001},                                // 3 interleaved
  };
  for (const Big& c : cases) {
    const HostLayout hosts = host_layout(make_args({Algorithm::kHierarchical,
                                                    static_cast<int>(c.hosts.size()), c.count,
                                                    false, 0, c.hosts})[0]);
    ASSERT_TRUE(hierarchical_inter_ring(probe, hosts.hosts(), c.count / hosts.max_local()));
    for (size_t chunk : {size_t{0}, size_t{1} << 16}) {
      const std::string err = run_case(
          {Algorithm::kHierarchical, static_cast<int>(c.hosts.size()), c.count, chunk != 0,
           chunk, c.hosts},
          1);
      ASSERT_TRUE(err.empty()) << err;
    }
  }
}

// The two group phases the hierarchy runs across hosts, on their own: the whole
// communicator as the group, so the expected result is a plain allreduce.
TEST(GroupAllreducePhases, RingAndRecursiveDoublingInPlace) {
  for (bool ring : {true, false}) {
    const Build build = [ring](const CollArgs& a) {
      ScheduleBuilder b(a, "phase");
      const Slice out = out_slice({0, a.count});
      b.copy(in_slice({0, a.count}), out);
      const Group all = rotated_group(a.size, a.rank, 0);
      if (ring) ring_allreduce_in_place(b, all, out);
      else recursive_doubling_allreduce_in_place(b, all, out);
      return std::move(b).finish();
    };
    for (int n = 1; n <= 13; ++n) {
      for (size_t count : counts_for(n)) {
        for (bool in_place : {false, true}) {
          for (size_t chunk : {size_t{0}, size_t{2}}) {
            const std::string err =
                run_case({Algorithm::kAuto, n, count, in_place, chunk, {}}, 1, build);
            ASSERT_TRUE(err.empty()) << (ring ? "ring: " : "recursive doubling: ") << err;
          }
        }
      }
    }
  }
}

// What a rank sends to ranks on other hosts, in elements.
size_t sent_across(const CollArgs& a, const Schedule& s) {
  size_t n = 0;
  for (const Step& st : s.steps) {
    if (st.kind == StepKind::kSend && a.host_of[st.peer] != a.host_of[a.rank]) n += st.src.count;
  }
  return n;
}

TEST(Hierarchical, OnlyOneShardPerRankCrossesHosts) {
  // Two hosts of four, interleaved: each rank sends at most its 1/4 shard to the other host,
  // where a flat ring sends ~2x the vector's 7/8 along links that cross hosts.
  Case c{Algorithm::kHierarchical, 8, 4096, false, 0, {0, 1, 0, 1, 0, 1, 0, 1}};
  for (const CollArgs& a : make_args(c)) {
    const Schedule s = find_algorithm(a.op, Algorithm::kHierarchical)->build(a);
    EXPECT_GT(sent_across(a, s), 0u);
    EXPECT_LE(sent_across(a, s), 4096u / 4) << "rank " << a.rank;
    for (const Step& st : s.steps) {
      // Everything else stays within the host.
      if (st.kind == StepKind::kSend && a.host_of[st.peer] == a.host_of[a.rank]) {
        EXPECT_LE(st.src.count, 4096u / 4);
      }
    }
  }
}

TEST(DoubleBinaryTree, RootSendsChunkDownBeforeTheLastChunkArrives) {
  // Rank 0 is tree 0's root; its child in tree 0 is rank 4 (n = 8).
  CollArgs a;
  a.op = CollOp::kAllreduce;
  a.size = 8;
  a.rank = 0;
  a.count = 2 * 64;
  a.chunk_count = 16;  // 4 chunks per half
  for (bool in_place : {false, true}) {
    a.in_place = in_place;
    const Schedule s = find_algorithm(a.op, Algorithm::kDoubleBinaryTree)->build(a);
    std::vector<StepId> up, down;  // receives from and sends to rank 4, in order
    for (StepId i = 0; i < s.steps.size(); ++i) {
      const Step& st = s.steps[i];
      if (st.peer != 4) continue;
      if (st.kind == StepKind::kSend) down.push_back(i);
      else up.push_back(i);
    }
    ASSERT_EQ(up.size(), 4u);
    ASSERT_EQ(down.size(), 4u);
    const std::set<StepId> anc = ancestors(s, down[0]);
    EXPECT_TRUE(anc.count(up[0])) << "in_place=" << in_place;
    EXPECT_FALSE(anc.count(up[3])) << "in_place=" << in_place;
  }
}

// ---- arguments, cost model, selection ----

TEST(Hierarchical, RejectsBadHostLists) {
  CollArgs a;
  a.size = 4;
  a.count = 8;
  a.host_of = {0, 1, 0};
  EXPECT_THROW(find_algorithm(a.op, Algorithm::kHierarchical)->build(a), Error);
  EXPECT_THROW(find_algorithm(a.op, Algorithm::kRing)->build(a), Error);
  a.host_of = {0, 1, -1, 0};
  EXPECT_THROW(find_algorithm(a.op, Algorithm::kHierarchical)->build(a), Error);
}

TEST(Hierarchical, AppliesOnlyAcrossHostsWithSharedHosts) {
  const AlgorithmInfo* h = find_algorithm(CollOp::kAllreduce, Algorithm::kHierarchical);
  ASSERT_NE(h, nullptr);
  ASSERT_NE(h->applies, nullptr);
  CollArgs a;
  a.size = 4;
  EXPECT_FALSE(h->applies(a));  // no host_of: one host
  a.host_of = {2, 2, 2, 2};
  EXPECT_FALSE(h->applies(a));
  a.host_of = {0, 1, 2, 3};     // one rank per host: nothing to do within hosts
  EXPECT_FALSE(h->applies(a));
  a.host_of = {0, 1, 0, 1};
  EXPECT_TRUE(h->applies(a));
  a.host_of = {0, 0, 0, 1};
  EXPECT_TRUE(h->applies(a));
  a.host_of = {0, 1, 0};        // wrong length: never applies (the builder would throw)
  EXPECT_FALSE(h->applies(a));
  for (Algorithm algo : {Algorithm::kDoubleBinaryTree, Algorithm::kHierarchical}) {
    Algorithm parsed = Algorithm::kAuto;
    EXPECT_TRUE(parse_algorithm(to_string(algo), &parsed));
    EXPECT_EQ(parsed, algo);
  }
}

// Shared memory inside a host, a 10x slower network with 15x the latency between hosts.
CostParams two_links() {
  CostParams p;
  p.alpha_us = 2;
  p.beta_bytes_per_us = 10000;
  p.inter_alpha_us = 30;
  p.inter_beta_bytes_per_us = 1000;
  return p;
}

CollArgs call(size_t bytes, std::vector<int> host_of) {
  CollArgs a;
  a.op = CollOp::kAllreduce;
  a.size = 16;
  a.dtype = DataType::kF32;
  a.count = bytes / 4;
  a.chunk_count = (size_t{1} << 20) / 4;  // what the communicator uses by default
  a.host_of = std::move(host_of);
  return a;
}

std::vector<int> blocks_of(int n, int per_host) {
  std::vector<int> v;
  for (int r = 0; r < n; ++r) v.push_back(r / per_host);
  return v;
}

TEST(AlgorithmCostModelHosts, PicksHierarchicalAcrossSlowHostsForLargeMessages) {
  const Config config;
  const size_t m = size_t{64} << 20;
  for (const std::vector<int>& hosts :
       {blocks_of(16, 8), blocks_of(16, 4), std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                                             0, 1, 0, 1}}) {
    const Selection s = select_algorithm(call(m, hosts), "", config, two_links());
    ASSERT_NE(s.info, nullptr);
    if (hosts[1] == 1) {
      // Dealt round-robin, halving-doubling's only round across hosts is its first (partners
      // r ^ 1), moving what the hierarchy's does: the two cost the same.
      EXPECT_TRUE(s.info->algorithm == Algorithm::kHierarchical ||
                  s.info->algorithm == Algorithm::kHalvingDoubling) << s.reason;
      continue;
    }
    EXPECT_EQ(s.info->algorithm, Algorithm::kHierarchical) << s.reason;
  }
}

TEST(AlgorithmCostModelHosts, NeverHierarchicalOnOneHost) {
  const Config config;
  for (size_t m : {size_t{8}, size_t{64} << 20}) {
    for (std::vector<int> hosts : {std::vector<int>{}, std::vector<int>(16, 7)}) {
      const Selection s = select_algorithm(call(m, hosts), "", config, two_links());
      EXPECT_NE(s.info->algorithm, Algorithm::kHierarchical) << s.reason;
    }
  }
  // Forcing it where it does not apply names the alternatives.
  try {
    select_algorithm(call(64, {}), "hierarchical", config, two_links());
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not apply"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("double_binary_tree"), std::string::npos) << e.what();
  }
  const Selection forced = select_algorithm(call(64, {}), "double_binary_tree", config, {});
  EXPECT_EQ(forced.info->algorithm, Algorithm::kDoubleBinaryTree);
}

TEST(AlgorithmCostModelHosts, FlatAlgorithmsPayTheInterHostLink) {
  const CostParams p = two_links();
  const AlgorithmInfo* ring = find_algorithm(CollOp::kAllreduce, Algorithm::kRing);
  const CollArgs one = call(1 << 20, {});
  const CollArgs two = call(1 << 20, blocks_of(16, 8));
  EXPECT_GT(ring->cost(two, p), 4 * ring->cost(one, p));  // the inter link is 10x slower
  // Without inter_* set, the inter link is the intra one.
  CostParams same = p;
  same.inter_alpha_us = 0;
  same.inter_beta_bytes_per_us = 0;
  EXPECT_DOUBLE_EQ(ring->cost(two, same), ring->cost(one, same));
  // Where the host's memory path is known, the 7 ring hops within a host share it.
  same.host_memory_bytes_per_us = same.beta_bytes_per_us;
  EXPECT_GT(ring->cost(two, same), 2 * ring->cost(one, same));
}

TEST(AlgorithmCostModel, DoubleBinaryTreeBeatsTheRingOnManyRanksWithPipelining) {
  // Thousands of ranks, a medium message, chunked: the ring's 2(n-1) latencies dominate.
  CollArgs a;
  a.op = CollOp::kAllreduce;
  a.size = 4096;
  a.dtype = DataType::kU8;
  a.count = size_t{4} << 20;
  a.chunk_count = size_t{64} << 10;
  const CostParams p;
  const double dbt = find_algorithm(a.op, Algorithm::kDoubleBinaryTree)->cost(a, p);
  EXPECT_LT(dbt, find_algorithm(a.op, Algorithm::kRing)->cost(a, p));
  EXPECT_LT(dbt, find_algorithm(a.op, Algorithm::kBinomialTree)->cost(a, p));
}

}  // namespace
}  // namespace plait::coll
