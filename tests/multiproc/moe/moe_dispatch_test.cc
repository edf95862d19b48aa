// Expert-parallel dispatch and combine on real ranks, both paths, every row dtype: each rank
// rebuilds every other rank's tokens and routing from the seed and checks, row by row, what
// it receives (source order, local expert numbers, weights, per-expert counts), what combine
// brings back, and a dispatch repeated from the handle (backward's). The routing is uneven,
// some ranks send no tokens, and in one round no token goes to the last rank.
#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/half.h"
#include "plait/communicator.h"
#include "plait/moe.h"
#include "support/job.h"
#include "support/ps_ranks.h"
#include "support/rank_checks.h"

namespace plait::testing {
namespace {

using namespace std::chrono_literals;
using moe::Path;

constexpr int kExperts = 8, kTopk = 2;
constexpr size_t kHidden = 5, kMaxTokens = 48;

size_t tokens_of(int rank, int round) { return static_cast<size_t>((rank * 7 + round * 13) % 41); }

// Token t of `rank` in `round`: its experts (distinct; in round 1 never the last rank's) and
// the value of its element j (small integers, exact in bf16).
void experts_of(int rank, int round, size_t t, int size, int64_t* out) {
  const int usable = round == 1 ? kExperts - kExperts / size : kExperts;
  const int a = static_cast<int>((rank * 31 + t * 17 + round * 5) % usable);
  int b = static_cast<int>((rank * 11 + t * 7 + round) % usable);
  if (b == a) b = (a + 1) % usable;
  out[0] = a;
  out[1] = (t % 5 == 4) ? -1 : b;  // some tokens use one expert only
}
float value(int rank, size_t t, size_t j) { return static_cast<float>((rank * 19 + t * 3) % 53 + j); }
float weight(size_t j) { return j == 0 ? 0.75f : 0.25f; }

void store(DataType dt, void* base, size_t i, float v) {
  if (dt == DataType::kF32) static_cast<float*>(base)[i] = v;
  else if (dt == DataType::kBF16) static_cast<uint16_t*>(base)[i] = float_to_bf16(v);
  else static_cast<_Float16*>(base)[i] = static_cast<_Float16>(v);
}
float load(DataType dt, const void* base, size_t i) {
  if (dt == DataType::kF32) return static_cast<const float*>(base)[i];
  if (dt == DataType::kBF16) return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
  return static_cast<float>(static_cast<const _Float16*>(base)[i]);
}

int check_round(moe::Dispatcher& d, DataType dt, Path path, int round) {
  const int me = d.rank(), n = d.size(), per = kExperts / n;
  const size_t es = dtype_size(dt);
  const size_t T = tokens_of(me, round);
  std::vector<int64_t> idx(T * kTopk);
  std::vector<float> w(T * kTopk);
  std::vector<std::byte> x(std::max<size_t>(T, 1) * kHidden * es);
  for (size_t t = 0; t < T; ++t) {
    experts_of(me, round, t, n, &idx[t * kTopk]);
    for (int j = 0; j < kTopk; ++j) w[t * kTopk + j] = weight(j);
    for (size_t j = 0; j < kHidden; ++j) store(dt, x.data(), t * kHidden + j, value(me, t, j));
  }
  std::vector<std::byte> recv_x;
  std::vector<int64_t> recv_idx;
  std::vector<float> recv_w;
  auto call = d.dispatch(x.data(), idx.data(), w.data(), T, [&](size_t rows) {
    recv_x.resize(std::max<size_t>(rows, 1) * kHidden * es);
    recv_idx.resize(std::max<size_t>(rows, 1) * kTopk);
    recv_w.resize(std::max<size_t>(rows, 1) * kTopk);
    return moe::RecvBuffers{recv_x.data(), recv_idx.data(), recv_w.data()};
  }, path);
  call->wait();
  CHECK_OR_FAIL(call->path() == path, "ran %s", std::string(moe::to_string(call->path())).c_str());
  auto handle = call->handle();
  // What should have come: every source's tokens with an expert here, in token order.
  size_t row = 0;
  std::vector<int64_t> per_expert(per, 0);
  std::vector<float> combined;  // per row, element 0 of its token after the combine below
  for (int s = 0; s < n; ++s) {
    for (size_t t = 0; t < tokens_of(s, round); ++t) {
      int64_t e[kTopk];
      experts_of(s, round, t, n, e);
      bool here = false;
      for (int j = 0; j < kTopk; ++j) here |= e[j] >= 0 && e[j] / per == me;
      if (!here) continue;
      CHECK_OR_FAIL(row < handle->num_recv(), "round %d: fewer rows than expected", round);
      for (size_t j = 0; j < kHidden; ++j)
        CHECK_OR_FAIL(load(dt, recv_x.data(), row * kHidden + j) == value(s, t, j),
                      "round %d row %zu (rank %d token %zu) element %zu: %g", round, row, s, t, j,
                      load(dt, recv_x.data(), row * kHidden + j));
      for (int j = 0; j < kTopk; ++j) {
        const bool mine = e[j] >= 0 && e[j] / per == me;
        CHECK_OR_FAIL(recv_idx[row * kTopk + j] == (mine ? e[j] - me * per : -1),
                      "round %d row %zu idx %d: %lld", round, row, j, (long long)recv_idx[row * kTopk + j]);
        CHECK_OR_FAIL(recv_w[row * kTopk + j] == (mine ? weight(j) : 0.0f), "round %d row %zu weight %d", round, row, j);
        if (mine) ++per_expert[e[j] - me * per];
      }
      int holders = 0;
      for (int j = 0; j < kTopk; ++j) {
        bool earlier = false;
        for (int i = 0; i < j; ++i) earlier |= e[i] >= 0 && e[i] / per == e[j] / per;
        holders += e[j] >= 0 && !earlier;
      }
      combined.push_back(static_cast<float>(holders) * value(s, t, 0));
      ++row;
    }
  }
  CHECK_OR_FAIL(row == handle->num_recv(), "round %d: %zu rows, expected %zu", round, handle->num_recv(), row);
  CHECK_OR_FAIL(call->tokens_per_expert() == per_expert, "round %d: tokens per expert differ", round);
  if (round == 1 && me == n - 1) CHECK_OR_FAIL(row == 0, "the last rank got %zu rows in round 1", row);

  // Combine the rows as they came, with their weights: token t comes back times the number of
  // ranks that hold its experts, and its weights whole.
  std::vector<std::byte> out(std::max<size_t>(T, 1) * kHidden * es);
  std::vector<float> out_w(std::max<size_t>(T, 1) * kTopk, -1.0f);
  auto c = d.combine(handle, recv_x.data(), recv_w.data(), out.data(), out_w.data(), path);
  c->wait();
  for (size_t t = 0; t < T; ++t) {
    int ranks = 0;
    for (int j = 0; j < kTopk; ++j) {
      const int64_t e = idx[t * kTopk + j];
      bool earlier = false;
      for (int i = 0; i < j; ++i) earlier |= idx[t * kTopk + i] >= 0 && idx[t * kTopk + i] / per == e / per;
      if (e >= 0 && !earlier) ++ranks;
      CHECK_OR_FAIL(out_w[t * kTopk + j] == (e >= 0 ? weight(j) : 0.0f), "round %d token %zu weight %d: %g", round,
                    t, j, out_w[t * kTopk + j]);
    }
    for (size_t j = 0; j < kHidden; ++j)
      CHECK_OR_FAIL(load(dt, out.data(), t * kHidden + j) == ranks * value(me, t, j),
                    "round %d token %zu element %zu: %g, want %d x %g", round, t, j,
                    load(dt, out.data(), t * kHidden + j), ranks, value(me, t, j));
  }
  // Backward of that combine: the combined rows go out again along the same routing.
  std::vector<std::byte> again(std::max<size_t>(handle->num_recv(), 1) * kHidden * es);
  d.dispatch(handle, out.data(), again.data(), path)->wait();
  for (size_t r = 0; r < handle->num_recv(); ++r)
    CHECK_OR_FAIL(load(dt, again.data(), r * kHidden) == combined[r],
                  "round %d: repeated dispatch row %zu: %g, want %g", round, r, load(dt, again.data(), r * kHidden),
                  combined[r]);
  // Without weights: combine of the repeat gives each token ranks^2 times its value.
  d.combine(handle, again.data(), nullptr, out.data(), nullptr, path)->wait();
  return 0;
}

int dispatch_child() {
  simulate_hosts();
  auto bootstrap = bootstrap_from_env(30s);
  auto comm = Communicator::create(bootstrap, {.name = "test"});
  int calls = 0;
  for (DataType dt : {DataType::kF32, DataType::kBF16, DataType::kF16}) {
    moe::Dispatcher d(comm, bootstrap,
                      {.num_experts = kExperts, .topk = kTopk, .hidden = kHidden, .dtype = dt,
                       .max_tokens = kMaxTokens, .name = "moe-" + std::string(to_string(dt))});
    for (Path path : {Path::kAlltoallv, Path::kOneSided})
      for (int round = 0; round < 3; ++round) {
        if (int rc = check_round(d, dt, path, round)) return rc;
        ++calls;
      }
    // Paths alternate call by call, as the cost model may pick.
    for (int round = 0; round < 4; ++round)
      if (int rc = check_round(d, dt, round % 2 ? Path::kOneSided : Path::kAlltoallv, round)) return rc;
    if (d.rank() == 0) std::printf("cost model: %s\n", d.cost_summary().c_str());
  }
  std::printf("rank %d: moe dispatch ok (%d rounds)\n", comm->rank(), calls);
  return 0;
}
ChildMode dispatch_mode("moe_dispatch", dispatch_child);

// MOE_DIE kills that rank after the first round; the others go on dispatching until the
// death reaches them, on the path MOE_PATH.
int dead_peer_child() {
  const int die = env_int("MOE_DIE", -1);
  auto bootstrap = bootstrap_from_env(30s);
  auto comm = Communicator::create(bootstrap, {.name = "test"});
  moe::Dispatcher d(comm, bootstrap,
                    {.num_experts = kExperts, .topk = kTopk, .hidden = kHidden, .max_tokens = kMaxTokens,
                     .path = moe::parse_path(std::getenv("MOE_PATH"))});
  try {
    for (int round = 0; round < 1000; ++round) {
      if (round == 1 && d.rank() == die) std::raise(SIGKILL);
      if (int rc = check_round(d, DataType::kF32, d.options().path, round % 3)) return rc;
    }
    std::printf("no failure reached this rank\n");
    return 1;
  } catch (const Error& e) {
    return report(e);
  }
}
ChildMode dead_peer_mode("moe_dead_peer", dead_peer_child);

class MoeDeadPeer : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeDeadPeer, FailsEveryOtherRankNamingTheDeadOne) {
  auto results = spawn_ranks(4, {0, 1, 2, 3}, "moe_dead_peer", [](int) {
    return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "60000"}, {"MOE_DIE", "2"}, {"MOE_PATH", GetParam()}};
  });
  for (const auto& r : results) {
    if (r.rank == 2) {
      EXPECT_EQ(r.status, 128 + SIGKILL) << r.output;
      continue;
    }
    EXPECT_EQ(r.status, 3) << "rank " << r.rank << ": " << r.output;
    const std::string error = error_line(r.output);
    EXPECT_NE(error.find("rank 2"), std::string::npos) << "rank " << r.rank << ": " << r.output;
    EXPECT_EQ(error.find("timed out"), std::string::npos) << r.output;
    if (std::getenv("MOE_SHOW")) std::printf("rank %d: %s\n", r.rank, error.c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, MoeDeadPeer, ::testing::Values("one-sided", "alltoallv"),
                         [](const auto& info) { return info.param == "one-sided" ? std::string("OneSided") : std::string("Alltoallv"); });

TEST(MoeDispatch, EveryRowArrivesOnceAtItsExpertsAndCombinesBackOnBothPaths) {
  JobResult r = run_job(4, "moe_dispatch", {{"PLAIT_TIMEOUT", "60000"}}, 300);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "moe dispatch ok"), 4u) << r.output;
}

TEST(MoeDispatch, WorksAcrossHostsOverTcp) {
  JobResult r = run_job(4, "moe_dispatch", {{"PLAIT_TIMEOUT", "60000"}, {"PLAIT_TEST_HOSTS", "2"}}, 300);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "moe dispatch ok"), 4u) << r.output;
}

}  // namespace
}  // namespace plait::testing
