// Every collective x algorithm x world size {1,2,3,4,5,8} x counts {0, 1, 7, 1023, 2^20+3}
// x dtypes and ops x in-place / out-of-place, run by real ranks (processes over TCP) and
// compared bit for bit with a reference computed locally.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>
#include <numeric>
#include <sstream>

#include "coll/select/algorithms.h"
#include "plait/plait.h"
#include "support/job.h"
#include "support/values.h"

namespace plait::testing {
namespace {

using coll::Algorithm;
using coll::CollOp;

struct Case {
  CollOp op;
  Algorithm algo;
  DataType dtype;
  ReduceOp redop;
  size_t count;
  bool in_place;
  int root;
  std::string describe() const {
    std::ostringstream o;
    o << to_string(op) << "/" << to_string(algo) << " " << to_string(dtype) << " "
      << to_string(redop) << " count=" << count << (in_place ? " in-place" : "")
      << " root=" << root;
    return o.str();
  }
};

// Runs one case on this rank; returns "" or what went wrong.
class CaseRunner {
 public:
  explicit CaseRunner(Communicator& comm) : comm_(comm), n_(comm.size()), me_(comm.rank()) {}

  std::string run(const Case& c) {
    CallOptions opts{.algorithm = std::string(to_string(c.algo))};
    switch (c.op) {
      case CollOp::kAllreduce: return allreduce(c, opts);
      case CollOp::kReduce: return reduce(c, opts);
      case CollOp::kBroadcast: return broadcast(c, opts);
      case CollOp::kAllgather: return allgather(c, opts);
      case CollOp::kAllgatherv: return allgatherv(c, opts);
      case CollOp::kReduceScatter: return reduce_scatter(c, opts);
      case CollOp::kReduceScatterv: return reduce_scatterv(c, opts);
      case CollOp::kAlltoall: return alltoall(c, opts);
      case CollOp::kAlltoallv: return alltoallv(c, opts);
      case CollOp::kGather: return gather(c, opts);
      case CollOp::kScatter: return scatter(c, opts);
      case CollOp::kBarrier: comm_.barrier(opts)->wait(); return "";
    }
    return "unknown op";
  }

 private:
  static std::string compare(const TypedBuffer& got, const TypedBuffer& want) {
    long i = first_mismatch(got, want);
    if (i < 0) return "";
    std::ostringstream o;
    o << "element " << i << ": got " << got.get(i) << ", want " << want.get(i);
    return o.str();
  }

  TypedBuffer reduce_input(const Case& c, size_t count) {
    TypedBuffer in(c.dtype, count);
    for (size_t i = 0; i < count; ++i) in.set(i, input_value(c.redop, c.dtype, me_, i));
    return in;
  }
  TypedBuffer reduce_expected(const Case& c, size_t count, size_t first = 0) {
    TypedBuffer out(c.dtype, count);
    for (size_t i = 0; i < count; ++i) out.set(i, reduced_value(c.redop, c.dtype, n_, first + i));
    return out;
  }
  // Blocks of `per_rank[r]` tagged elements for every rank r, concatenated.
  TypedBuffer tagged_blocks(DataType t, const std::vector<size_t>& per_rank) {
    TypedBuffer b(t, std::accumulate(per_rank.begin(), per_rank.end(), size_t{0}));
    size_t k = 0;
    for (int r = 0; r < n_; ++r)
      for (size_t i = 0; i < per_rank[r]; ++i) b.set(k++, tag_value(t, r, i));
    return b;
  }
  TypedBuffer tagged(DataType t, int rank, size_t count, size_t salt = 0) {
    TypedBuffer b(t, count);
    for (size_t i = 0; i < count; ++i) b.set(i, tag_value(t, rank, i + salt));
    return b;
  }

  std::string allreduce(const Case& c, const CallOptions& o) {
    TypedBuffer in = reduce_input(c, c.count), out(c.dtype, c.count, 99);
    TypedBuffer& dst = c.in_place ? in : out;
    comm_.allreduce(c.in_place ? nullptr : in.data(), dst.data(), c.count, c.dtype, c.redop, o)->wait();
    return compare(dst, reduce_expected(c, c.count));
  }
  std::string reduce(const Case& c, const CallOptions& o) {
    TypedBuffer in = reduce_input(c, c.count), out(c.dtype, c.count, 99);
    const bool root = me_ == c.root;
    TypedBuffer& dst = c.in_place && root ? in : out;
    comm_.reduce(c.in_place && root ? nullptr : in.data(), root ? dst.data() : nullptr, c.count,
                 c.dtype, c.redop, c.root, o)->wait();
    return root ? compare(dst, reduce_expected(c, c.count)) : compare(in, reduce_input(c, c.count));
  }
  std::string broadcast(const Case& c, const CallOptions& o) {
    TypedBuffer want = tagged(c.dtype, c.root, c.count);
    TypedBuffer in = me_ == c.root ? want : TypedBuffer(c.dtype, c.count, 99);
    TypedBuffer out(c.dtype, c.count, 98);
    TypedBuffer& dst = c.in_place ? in : out;
    comm_.broadcast(c.in_place ? nullptr : in.data(), dst.data(), c.count, c.dtype, c.root, o)->wait();
    return compare(dst, want);
  }
  std::string allgather(const Case& c, const CallOptions& o) {
    TypedBuffer want = tagged_blocks(c.dtype, std::vector<size_t>(n_, c.count));
    TypedBuffer out(c.dtype, c.count * n_, 99), in = tagged(c.dtype, me_, c.count);
    if (c.in_place) {
      for (size_t i = 0; i < c.count; ++i) out.set(me_ * c.count + i, in.get(i));
      comm_.allgather(nullptr, out.data(), c.count, c.dtype, o)->wait();
    } else {
      comm_.allgather(in.data(), out.data(), c.count, c.dtype, o)->wait();
    }
    return compare(out, want);
  }
  std::vector<size_t> uneven(size_t count) {  // rank r contributes count + r % 3 - 1 (>= 0)
    std::vector<size_t> v(n_);
    for (int r = 0; r < n_; ++r) v[r] = r % 3 == 0 && count > 0 ? count - 1 : count + r % 3;
    return v;
  }
  std::string allgatherv(const Case& c, const CallOptions& o) {
    std::vector<size_t> counts = uneven(c.count);
    TypedBuffer want = tagged_blocks(c.dtype, counts);
    TypedBuffer out(c.dtype, want.count(), 99), in = tagged(c.dtype, me_, counts[me_]);
    size_t off = std::accumulate(counts.begin(), counts.begin() + me_, size_t{0});
    if (c.in_place) {
      for (size_t i = 0; i < counts[me_]; ++i) out.set(off + i, in.get(i));
      comm_.allgatherv(nullptr, out.data(), counts, c.dtype, o)->wait();
    } else {
      comm_.allgatherv(in.data(), out.data(), counts, c.dtype, o)->wait();
    }
    return compare(out, want);
  }
  std::string reduce_scatter(const Case& c, const CallOptions& o) {
    TypedBuffer in = reduce_input(c, c.count * n_), out(c.dtype, c.count, 99);
    TypedBuffer want = reduce_expected(c, c.count, me_ * c.count);
    if (c.in_place) {
      comm_.reduce_scatter(nullptr, in.data(), c.count, c.dtype, c.redop, o)->wait();
      in.bytes.resize(c.count * dtype_size(c.dtype));
      return compare(in, want);
    }
    comm_.reduce_scatter(in.data(), out.data(), c.count, c.dtype, c.redop, o)->wait();
    return compare(out, want);
  }
  std::string reduce_scatterv(const Case& c, const CallOptions& o) {
    std::vector<size_t> counts = uneven(c.count);
    size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    size_t off = std::accumulate(counts.begin(), counts.begin() + me_, size_t{0});
    TypedBuffer in = reduce_input(c, total), out(c.dtype, counts[me_], 99);
    TypedBuffer want = reduce_expected(c, counts[me_], off);
    if (c.in_place) {
      comm_.reduce_scatterv(nullptr, in.data(), counts, c.dtype, c.redop, o)->wait();
      in.bytes.resize(counts[me_] * dtype_size(c.dtype));
      return compare(in, want);
    }
    comm_.reduce_scatterv(in.data(), out.data(), counts, c.dtype, c.redop, o)->wait();
    return compare(out, want);
  }
  std::string alltoall(const Case& c, const CallOptions& o) {
    // Block p of rank r carries tag_value(r, p * count + i).
    TypedBuffer in = tagged(c.dtype, me_, c.count * n_), out(c.dtype, c.count * n_, 99);
    TypedBuffer want(c.dtype, c.count * n_);
    for (int p = 0; p < n_; ++p)
      for (size_t i = 0; i < c.count; ++i) want.set(p * c.count + i, tag_value(c.dtype, p, me_ * c.count + i));
    comm_.alltoall(in.data(), out.data(), c.count, c.dtype, o)->wait();
    return compare(out, want);
  }
  std::string alltoallv(const Case& c, const CallOptions& o) {
    // Rank r sends (c.count + r + p) % 5 + c.count elements to rank p... kept simple: count_rp.
    auto count_of = [&](int from, int to) { return c.count == 0 ? 0 : c.count + (from + 2 * to) % 3; };
    std::vector<size_t> sc(n_), sd(n_), rc(n_), rd(n_);
    size_t st = 0, rt = 0;
    for (int p = 0; p < n_; ++p) {
      sc[p] = count_of(me_, p), sd[p] = st, st += sc[p];
      rc[p] = count_of(p, me_), rd[p] = rt, rt += rc[p];
    }
    TypedBuffer in(c.dtype, st), out(c.dtype, rt, 99), want(c.dtype, rt);
    for (int p = 0; p < n_; ++p) {
      for (size_t i = 0; i < sc[p]; ++i) in.set(sd[p] + i, tag_value(c.dtype, me_, p * 10 + i));
      for (size_t i = 0; i < rc[p]; ++i) want.set(rd[p] + i, tag_value(c.dtype, p, me_ * 10 + i));
    }
    comm_.alltoallv(in.data(), sc, sd, out.data(), rc, rd, c.dtype, o)->wait();
    return compare(out, want);
  }
  std::string gather(const Case& c, const CallOptions& o) {
    TypedBuffer in = tagged(c.dtype, me_, c.count), out(c.dtype, c.count * n_, 99);
    const bool root = me_ == c.root;
    if (c.in_place && root) {
      for (size_t i = 0; i < c.count; ++i) out.set(me_ * c.count + i, in.get(i));
      comm_.gather(nullptr, out.data(), c.count, c.dtype, c.root, o)->wait();
    } else {
      comm_.gather(in.data(), root ? out.data() : nullptr, c.count, c.dtype, c.root, o)->wait();
    }
    if (!root) return "";
    return compare(out, tagged_blocks(c.dtype, std::vector<size_t>(n_, c.count)));
  }
  std::string scatter(const Case& c, const CallOptions& o) {
    const bool root = me_ == c.root;
    TypedBuffer in = tagged_blocks(c.dtype, std::vector<size_t>(n_, c.count));
    TypedBuffer out(c.dtype, c.count, 99);
    comm_.scatter(root ? in.data() : nullptr, out.data(), c.count, c.dtype, c.root, o)->wait();
    return compare(out, tagged(c.dtype, me_, c.count));
  }

  Communicator& comm_;
  const int n_;
  const int me_;
};

bool reduces(CollOp op) {
  return op == CollOp::kAllreduce || op == CollOp::kReduce || op == CollOp::kReduceScatter ||
         op == CollOp::kReduceScatterv;
}
bool has_root(CollOp op) {
  return op == CollOp::kReduce || op == CollOp::kBroadcast || op == CollOp::kGather ||
         op == CollOp::kScatter;
}
bool has_in_place(CollOp op) {
  return op != CollOp::kAlltoall && op != CollOp::kAlltoallv && op != CollOp::kScatter &&
         op != CollOp::kBarrier;
}

std::vector<Case> sweep_cases(int size) {
  const CollOp ops[] = {CollOp::kAllreduce, CollOp::kReduce, CollOp::kBroadcast,
                        CollOp::kAllgather, CollOp::kAllgatherv, CollOp::kReduceScatter,
                        CollOp::kReduceScatterv, CollOp::kAlltoall, CollOp::kAlltoallv,
                        CollOp::kGather, CollOp::kScatter, CollOp::kBarrier};
  const std::pair<DataType, ReduceOp> reduce_types[] = {
      {DataType::kF32, ReduceOp::kSum},  {DataType::kF16, ReduceOp::kSum},
      {DataType::kBF16, ReduceOp::kMax}, {DataType::kI32, ReduceOp::kMin},
      {DataType::kI8, ReduceOp::kProd},  {DataType::kF64, ReduceOp::kAvg},
      {DataType::kU8, ReduceOp::kSum},   {DataType::kI64, ReduceOp::kAvg}};
  const DataType move_types[] = {DataType::kF32, DataType::kBF16, DataType::kI8, DataType::kI64};
  const size_t counts[] = {0, 1, 7, 1023};
  // The hierarchical algorithm needs ranks on several hosts (the "mixed" runs).
  const bool several_hosts = std::getenv("PLAIT_TEST_HOSTS") != nullptr && size > 2;
  // The shm algorithm needs every rank on one host and a transport other than plain tcp.
  const char* transport = std::getenv("PLAIT_TRANSPORT");
  const bool segment = !several_hosts && size > 1 &&
                       !(transport != nullptr && std::string(transport) == "tcp");
  std::vector<Case> cases;
  for (CollOp op : ops) {
    for (Algorithm algo : coll::algorithms_for(op)) {
      if (algo == Algorithm::kHierarchical && !several_hosts) continue;
      if (algo == Algorithm::kShm && !segment) continue;
      const int root = has_root(op) ? size - 1 : 0;
      if (op == CollOp::kBarrier) {
        cases.push_back({op, algo, DataType::kU8, ReduceOp::kSum, 0, false, 0});
        continue;
      }
      for (size_t count : counts) {
        for (bool in_place : {false, true}) {
          if (in_place && !has_in_place(op)) continue;
          if (reduces(op)) {
            for (auto [t, r] : reduce_types) cases.push_back({op, algo, t, r, count, in_place, root});
          } else {
            for (DataType t : move_types) cases.push_back({op, algo, t, ReduceOp::kSum, count, in_place, root});
          }
        }
      }
      // One large, odd count per (op, algorithm): chunking, striping and rendezvous paths.
      size_t big = (size_t{1} << 20) + 3;
      if (op == CollOp::kAlltoall || op == CollOp::kAlltoallv || op == CollOp::kAllgather ||
          op == CollOp::kAllgatherv || op == CollOp::kGather || op == CollOp::kScatter ||
          op == CollOp::kReduceScatter || op == CollOp::kReduceScatterv)
        big = big / size + 1;  // these move size x count elements
      cases.push_back({op, algo, DataType::kF32, ReduceOp::kSum, big, false, has_root(op) ? 0 : 0});
    }
  }
  return cases;
}

int run_sweep() {
  // Simulated hosts: ranks r and r + k share host r % k, so "mixed" jobs use shm between
  // some pairs and tcp between the others.
  if (const char* hosts = std::getenv("PLAIT_TEST_HOSTS")) {
    const char* rank = std::getenv("RANK");
    std::string id = "h" + std::to_string(std::atoi(rank ? rank : "0") % std::atoi(hosts));
    ::setenv("PLAIT_HOST_ID", id.c_str(), 1);
  }
  Bootstrap boot = bootstrap_from_env(std::chrono::seconds(60));
  auto comm = Communicator::create(boot);
  CaseRunner runner(*comm);
  int failed = 0, passed = 0;
  for (const Case& c : sweep_cases(comm->size())) {
    std::string what;
    try {
      what = runner.run(c);
    } catch (const Error& e) {
      what = e.what();
    }
    if (what.empty()) {
      ++passed;
    } else {
      ++failed;
      std::printf("FAIL %s: %s\n", c.describe().c_str(), what.c_str());
      if (failed > 20) break;
    }
  }
  std::printf("rank %d: %d cases passed, %d failed\n", comm->rank(), passed, failed);
  return failed == 0 ? 0 : 1;
}
ChildMode sweep("sweep", run_sweep);

// (world size, transport): "tcp" and "shm" force one provider for every peer; "mixed" puts
// the ranks on two simulated hosts, so each rank reaches some peers by shm, others by tcp.
using SweepParam = std::tuple<int, std::string>;
class CollectiveSweep : public ::testing::TestWithParam<SweepParam> {};

TEST_P(CollectiveSweep, EveryCollectiveAndAlgorithmMatchesTheReference) {
  const auto& [np, transport] = GetParam();
  // Small segment slots: the counts below take several rounds and split reductions there.
  std::map<std::string, std::string> env = {{"PLAIT_TIMEOUT", "120000"},
                                            {"PLAIT_SHM_COLL_SLOT", "4K"}};
  if (transport == "mixed") {
    env["PLAIT_TEST_HOSTS"] = "2";
  } else if (transport == "mixed_messages") {
    // No host segments: the hierarchical allreduce's intra-host stages are ring phases
    // over messages at every count (with them, only large counts are).
    env["PLAIT_TEST_HOSTS"] = "2";
    env["PLAIT_SHM_COLL"] = "off";
  } else if (transport == "mixed_ucx") {
    // shm within each simulated host, UCX (over its tcp transport) between them.
    env["PLAIT_TEST_HOSTS"] = "2";
    env["PLAIT_TRANSPORT"] = "shm+ucx";
    env["PLAIT_UCX_TLS"] = "tcp";
  } else if (transport.rfind("ucx_", 0) == 0) {
    // The ucx provider to every peer, over one of UCX's transports here (an RDMA NIC's
    // on a cluster: PLAIT_UCX_TLS unset).
    env["PLAIT_TRANSPORT"] = "ucx";
    env["PLAIT_UCX_TLS"] = transport.substr(4);
  } else {
    env["PLAIT_TRANSPORT"] = transport;
  }
  JobResult r = run_job(np, "sweep", env, 900);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("0 failed"), std::string::npos) << r.output;
}

std::string sweep_name(const ::testing::TestParamInfo<SweepParam>& info) {
  return std::get<1>(info.param) + "_np" + std::to_string(std::get<0>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Tcp, CollectiveSweep,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 8),
                                            ::testing::Values("tcp")),
                         sweep_name);
INSTANTIATE_TEST_SUITE_P(Shm, CollectiveSweep,
                         ::testing::Combine(::testing::Values(2, 3, 4, 8),
                                            ::testing::Values("shm")),
                         sweep_name);
INSTANTIATE_TEST_SUITE_P(Ucx, CollectiveSweep,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values("ucx_tcp", "ucx_sm")),
                         sweep_name);
INSTANTIATE_TEST_SUITE_P(MixedUcx, CollectiveSweep,
                         ::testing::Combine(::testing::Values(4), ::testing::Values("mixed_ucx")),
                         sweep_name);
INSTANTIATE_TEST_SUITE_P(Mixed, CollectiveSweep,
                         ::testing::Combine(::testing::Values(4, 5),
                                            ::testing::Values("mixed")),
                         sweep_name);
INSTANTIATE_TEST_SUITE_P(MixedMessages, CollectiveSweep,
                         ::testing::Combine(::testing::Values(5),
                                            ::testing::Values("mixed_messages")),
                         sweep_name);

}  // namespace
}  // namespace plait::testing
