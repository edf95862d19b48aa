// The parameter server on real ranks: every update rule and dtype against a scalar
// reference under BSP, keys from one element to 64 MiB, 1-4 servers x 1-4 workers, batched
// calls, every completion-thread wait policy. Consistency modes: ps_consistency_test.cc;
// bad input and faults: ps_faults_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/half.h"
#include "support/job.h"
#include "support/ps_ranks.h"

namespace plait::testing {
namespace {

// BSP with the summation service, means and every optimizer, f32, f16 and bf16 keys, sizes
// from one element to many partitions; plain, batched and in-place calls; the versions.
int bsp_child() {
  auto kv = make_store(Consistency::kBsp);
  const int W = kv->num_workers();
  // Keys: id, elements, dtype, rule.
  struct K {
    uint64_t id;
    size_t n;
    DataType dtype;
    Rule rule;
  };
  const std::vector<K> keys = {
      {1, 1, DataType::kF32, Rule::kSum},         {2, 1000, DataType::kF32, Rule::kMean},
      {3, 300000, DataType::kF32, Rule::kSum},    // 1.2 MB: several 256 KiB partitions
      {4, 5000, DataType::kF32, Rule::kSgd},      {5, 5000, DataType::kF32, Rule::kMomentum},
      {6, 5000, DataType::kF32, Rule::kAdam},     {7, 2049, DataType::kF16, Rule::kSum},
      {8, 2049, DataType::kBF16, Rule::kSgd},     {9, 777, DataType::kF64, Rule::kAdam},
      {10, 100, DataType::kI32, Rule::kSum},
  };
  ps::Update upd;
  upd.lr = 0.5f;
  upd.momentum = 0.9f;
  upd.weight_decay = 0.01f;
  std::vector<ps::KeySpec> specs;
  std::vector<std::vector<double>> init(keys.size());
  std::vector<std::vector<uint8_t>> init_bytes(keys.size());
  for (size_t k = 0; k < keys.size(); ++k) {
    ps::KeySpec s;
    s.key = keys[k].id;
    s.count = keys[k].n;
    s.dtype = keys[k].dtype;
    s.options.update = upd;
    s.options.update.rule = keys[k].rule;
    if (keys[k].rule == Rule::kAdam) s.options.update.lr = 0.01f;
    // Initial values for the optimizer keys; zeros for the sums.
    init[k].assign(keys[k].n, 0.0);
    init_bytes[k].resize(keys[k].n * dtype_size(keys[k].dtype));
    if (keys[k].rule != Rule::kSum && keys[k].rule != Rule::kMean) {
      for (size_t i = 0; i < keys[k].n; ++i) init[k][i] = static_cast<double>(i % 7) - 3.0;
      for (size_t i = 0; i < keys[k].n; ++i) {
        const double v = init[k][i];
        uint8_t* p = init_bytes[k].data() + i * dtype_size(keys[k].dtype);
        switch (keys[k].dtype) {
          case DataType::kF32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
          case DataType::kF64: std::memcpy(p, &v, 8); break;
          case DataType::kBF16: { uint16_t h = float_to_bf16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
          case DataType::kF16: { uint16_t h = float_to_half(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
          default: break;
        }
      }
      s.options.init = init_bytes[k].data();
    }
    specs.push_back(s);
  }
  kv->register_keys(specs);
  if (kv->is_server()) {
    kv->finalize();
    return 0;
  }
  const int me = kv->worker_index();
  // The scalar reference of every key (in double), stepped alongside.
  std::vector<std::vector<double>> w = init, m(keys.size()), v(keys.size());
  for (size_t k = 0; k < keys.size(); ++k) {
    m[k].assign(keys[k].n, 0.0);
    v[k].assign(keys[k].n, 0.0);
  }
  const int steps = 3;
  for (int step = 1; step <= steps; ++step) {
    std::vector<std::vector<uint8_t>> g(keys.size()), out(keys.size());
    std::vector<const void*> gp;
    std::vector<void*> op;
    std::vector<uint64_t> ids;
    for (size_t k = 0; k < keys.size(); ++k) {
      const size_t es = dtype_size(keys[k].dtype);
      g[k].resize(keys[k].n * es);
      out[k].assign(keys[k].n * es, 0xee);
      for (size_t i = 0; i < keys[k].n; ++i) {
        const float f = grad(me, step, i);
        uint8_t* p = g[k].data() + i * es;
        switch (keys[k].dtype) {
          case DataType::kF32: std::memcpy(p, &f, 4); break;
          case DataType::kF64: { double d = f; std::memcpy(p, &d, 8); break; }
          case DataType::kF16: { uint16_t h = float_to_half(f); std::memcpy(p, &h, 2); break; }
          case DataType::kBF16: { uint16_t h = float_to_bf16(f); std::memcpy(p, &h, 2); break; }
          case DataType::kI32: { int32_t x = static_cast<int32_t>(f); std::memcpy(p, &x, 4); break; }
          default: break;
        }
      }
      gp.push_back(g[k].data());
      op.push_back(out[k].data());
      ids.push_back(keys[k].id);
    }
    // Step 1 one call per key; step 2 one batched call; step 3 push then pull.
    std::vector<uint64_t> versions;
    if (step == 1) {
      std::vector<ps::PsWorkPtr> works;
      for (size_t k = 0; k < keys.size(); ++k)
        works.push_back(kv->push_pull(keys[k].id, gp[k], op[k], keys[k].n, keys[k].dtype));
      for (auto& wk : works) {
        wk->wait();
        versions.push_back(wk->version());
      }
    } else if (step == 2) {
      auto wk = kv->push_pull(ids, gp, op);
      wk->wait();
      versions.push_back(wk->version());
    } else {
      kv->push(ids, gp)->wait();
      auto wk = kv->pull(ids, op);
      wk->wait();
      versions.push_back(wk->version());
    }
    for (uint64_t ver : versions)
      CHECK_OR_FAIL(ver == static_cast<uint64_t>(step), "step %d: version %llu", step,
                    static_cast<unsigned long long>(ver));
    // The reference: the round's sum (or mean) over workers, then the rule.
    for (size_t k = 0; k < keys.size(); ++k) {
      const ps::Update& u = specs[k].options.update;
      for (size_t i = 0; i < keys[k].n; ++i) {
        double sum = 0;
        for (int wk = 0; wk < W; ++wk) sum += grad(wk, step, i);
        double& x = w[k][i];
        const double mean = sum / W;
        switch (keys[k].rule) {
          case Rule::kSum: x = sum; break;
          case Rule::kMean: x = mean; break;
          case Rule::kSgd: x -= u.lr * (mean + u.weight_decay * x); break;
          case Rule::kMomentum: {
            const double d = mean + u.weight_decay * x;
            m[k][i] = step == 1 ? d : u.momentum * m[k][i] + d;
            x -= u.lr * m[k][i];
            break;
          }
          case Rule::kAdam: {
            const double d = mean + u.weight_decay * x;
            m[k][i] = u.beta1 * m[k][i] + (1 - u.beta1) * d;
            v[k][i] = u.beta2 * v[k][i] + (1 - u.beta2) * d * d;
            const double bc1 = 1 - std::pow(u.beta1, step), bc2 = 1 - std::pow(u.beta2, step);
            x -= u.lr / bc1 * m[k][i] / (std::sqrt(v[k][i]) / std::sqrt(bc2) + u.eps);
            break;
          }
        }
        const uint8_t* p = out[k].data() + i * dtype_size(keys[k].dtype);
        double got = 0;
        switch (keys[k].dtype) {
          case DataType::kF32: { float f; std::memcpy(&f, p, 4); got = f; break; }
          case DataType::kF64: std::memcpy(&got, p, 8); break;
          case DataType::kF16: { uint16_t h; std::memcpy(&h, p, 2); got = half_to_float(h); break; }
          case DataType::kBF16: { uint16_t h; std::memcpy(&h, p, 2); got = bf16_to_float(h); break; }
          case DataType::kI32: { int32_t y; std::memcpy(&y, p, 4); got = y; break; }
          default: break;
        }
        // Sums of small integers are exact.
        // f32 and f64 within a few ulps of the reference; f16/bf16 within their rounding.
        const bool exact = keys[k].rule == Rule::kSum;
        double rel = 0;
        switch (keys[k].dtype) {
          case DataType::kF32: rel = 2e-6; break;
          case DataType::kF64: rel = 1e-12; break;
          case DataType::kF16: rel = 1e-3; break;
          case DataType::kBF16: rel = 8e-3; break;
          default: break;
        }
        const double tol = exact ? 0.0 : rel * (1 + std::fabs(x));
        CHECK_OR_FAIL(std::fabs(got - x) <= tol, "step %d key %llu (%s) element %zu: got %.9g want %.9g",
                      step, static_cast<unsigned long long>(keys[k].id),
                      std::string(ps::to_string(keys[k].rule)).c_str(), i, got, x);
      }
    }
  }
  kv->finalize();
  std::printf("worker %d: ps bsp ok\n", me);
  return 0;
}

ChildMode bsp_mode("ps_bsp", bsp_child);

// The extremes of key size in one store: one element, and 64 MiB (256 chunks over the
// servers), pushed and pulled twice, exact.
int large_child() {
  auto kv = make_store(Consistency::kBsp);
  const size_t big = size_t{16} << 20;  // floats: 64 MiB
  kv->register_keys({{.key = 1, .count = 1, .dtype = DataType::kF32},
                     {.key = 2, .count = big, .dtype = DataType::kF32}});
  if (kv->is_server()) {
    kv->finalize();
    return 0;
  }
  const int W = kv->num_workers(), me = kv->worker_index();
  std::vector<float> g(big), out(big);
  float one = 0, one_out = 0;
  for (int step = 1; step <= 2; ++step) {
    for (size_t i = 0; i < big; ++i) g[i] = static_cast<float>((me + 1) * step + static_cast<int>(i % 1000));
    one = static_cast<float>(me + step);
    auto w = kv->push_pull({1, 2}, {&one, g.data()}, {&one_out, out.data()});
    w->wait();
    CHECK_OR_FAIL(w->version() == static_cast<uint64_t>(step), "version %llu", static_cast<unsigned long long>(w->version()));
    float want_one = 0;
    for (int k = 0; k < W; ++k) want_one += static_cast<float>(k + step);
    CHECK_OR_FAIL(one_out == want_one, "the one-element key: %g, want %g", one_out, want_one);
    for (size_t i = 0; i < big; ++i) {
      const float want = static_cast<float>(W * (W + 1) / 2 * step + W * static_cast<int>(i % 1000));
      CHECK_OR_FAIL(out[i] == want, "step %d element %zu: %g, want %g", step, i, out[i], want);
    }
  }
  kv->finalize();
  std::printf("worker %d: ps large ok\n", me);
  return 0;
}

ChildMode large_mode("ps_large", large_child);

// BSP with a worker a round ahead: worker 0 pushes rounds 1 and 2 before worker 1 (slower)
// pushes round 1, so the server holds worker 0's second push and must still take worker 1's
// first past it. Pulls then see round 2's sum.
int ahead_child() {
  auto kv = make_store(Consistency::kBsp);
  const size_t n = 100000;  // a few chunks
  kv->register_key(1, n, DataType::kF32);
  if (kv->is_server()) {
    kv->finalize();
    return 0;
  }
  const int W = kv->num_workers(), me = kv->worker_index();
  if (me != 0) std::this_thread::sleep_for(200ms);
  std::vector<float> g1(n), g2(n), out(n);
  for (size_t i = 0; i < n; ++i) {
    g1[i] = grad(me, 1, i);
    g2[i] = grad(me, 2, i);
  }
  auto first = kv->push(1, g1.data(), n, DataType::kF32);
  auto second = kv->push(1, g2.data(), n, DataType::kF32);
  first->wait();
  second->wait();
  auto pulled = kv->pull(1, out.data(), n, DataType::kF32);
  pulled->wait();
  CHECK_OR_FAIL(pulled->version() == 2, "version %llu", static_cast<unsigned long long>(pulled->version()));
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int w = 0; w < W; ++w) want += grad(w, 2, i);
    CHECK_OR_FAIL(out[i] == want, "element %zu: %g, want %g", i, out[i], want);
  }
  kv->finalize();
  std::printf("worker %d: ps ahead ok\n", me);
  return 0;
}

ChildMode ahead_mode("ps_ahead", ahead_child);

// BSP with workers that push their keys in opposite orders, more keys than ring slots: the
// first push of each key waits in its slot for the others', so a server that let them keep
// every slot would leave each worker without a slot for the keys the other one waits for.
int opposite_child() {
  auto kv = make_store(Consistency::kBsp);
  const int keys = 24;
  const size_t n = 64;
  for (int k = 0; k < keys; ++k) kv->register_key(static_cast<uint64_t>(k), n, DataType::kF32);
  if (kv->is_server()) {
    kv->finalize();
    return 0;
  }
  const int W = kv->num_workers(), me = kv->worker_index();
  std::vector<std::vector<float>> g(keys, std::vector<float>(n)), out(keys, std::vector<float>(n));
  std::vector<ps::PsWorkPtr> works;
  for (int j = 0; j < keys; ++j) {
    const int k = me % 2 == 0 ? j : keys - 1 - j;
    for (size_t i = 0; i < n; ++i) g[k][i] = grad(me, k, i);
    works.push_back(kv->push_pull(static_cast<uint64_t>(k), g[k].data(), out[k].data(), n, DataType::kF32));
  }
  for (auto& w : works) w->wait();
  for (int k = 0; k < keys; ++k)
    for (size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int w = 0; w < W; ++w) want += grad(w, k, i);
      CHECK_OR_FAIL(out[k][i] == want, "key %d element %zu: %g, want %g", k, i, out[k][i], want);
    }
  kv->finalize();
  std::printf("worker %d: ps opposite ok\n", me);
  return 0;
}

ChildMode opposite_mode("ps_opposite", opposite_child);

struct Shape {
  int servers;
  int workers;
};
void PrintTo(const Shape& s, std::ostream* os) { *os << s.servers << "x" << s.workers; }

class PsBsp : public ::testing::TestWithParam<Shape> {};

TEST_P(PsBsp, EveryRuleAndDtypeMatchesTheScalarReference) {
  const Shape s = GetParam();
  JobResult r = run_job(s.servers + s.workers, "ps_bsp",
                        {{"PLAIT_TIMEOUT", "60000"},
                         {"PS_SERVERS", std::to_string(s.servers)},
                         {"PLAIT_PS_PARTITION", "256K"},
                         {"PLAIT_PS_CHUNK", "64K"},
                         {"PLAIT_PS_SLOTS", "2"}},
                        300);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "ps bsp ok"), static_cast<size_t>(s.workers)) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Shapes, PsBsp,
                         ::testing::Values(Shape{1, 1}, Shape{1, 2}, Shape{2, 2}, Shape{2, 3},
                                           Shape{4, 1}, Shape{1, 4}),
                         [](const auto& info) {
                           return std::to_string(info.param.servers) + "servers_" +
                                  std::to_string(info.param.workers) + "workers";
                         });


TEST(PsKeys, OneElementAndSixtyFourMiBInOneCall) {
  JobResult r = run_job(4, "ps_large", {{"PLAIT_TIMEOUT", "60000"}, {"PS_SERVERS", "2"}}, 300);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "ps large ok"), 2u) << r.output;
}


TEST(PsWait, EveryCompletionThreadPolicyServes) {
  for (const char* policy : {"spin", "block"}) {
    JobResult r = run_job(4, "ps_bsp",
                          {{"PLAIT_TIMEOUT", "60000"}, {"PS_SERVERS", "2"}, {"PLAIT_PS_WAIT", policy},
                           {"PLAIT_PS_PARTITION", "256K"}, {"PLAIT_PS_CHUNK", "64K"}},
                          300);
    EXPECT_EQ(r.status, 0) << policy << ": " << r.output;
    EXPECT_EQ(count_of(r.output, "ps bsp ok"), 2u) << policy << ": " << r.output;
  }
}


// A 1 MiB key in 256 KiB partitions over 2 servers, 64 KiB chunks: the push bytes on the wire never exceed the
// window (WANT_PEAK_MAX), and the sums are exact.
int window_child() {
  auto kv = make_store(Consistency::kBsp);
  const size_t n = 262144;
  kv->register_key(1, n, DataType::kF32);
  if (kv->is_server()) {
    kv->finalize();
    return 0;
  }
  const int W = kv->num_workers(), me = kv->worker_index();
  std::vector<float> g(n), out(n);
  for (size_t i = 0; i < n; ++i) g[i] = grad(me, 1, i);
  kv->push_pull(1, g.data(), out.data(), n, DataType::kF32)->wait();
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int w = 0; w < W; ++w) want += grad(w, 1, i);
    CHECK_OR_FAIL(out[i] == want, "element %zu: %g, want %g", i, out[i], want);
  }
  const ps::Stats st = kv->stats();
  const uint64_t limit = static_cast<uint64_t>(env_int("WANT_PEAK_MAX", 0));
  CHECK_OR_FAIL(st.peak_bytes_on_wire > 0 && st.peak_bytes_on_wire <= limit,
                "peak push bytes on the wire %llu, limit %llu",
                static_cast<unsigned long long>(st.peak_bytes_on_wire), static_cast<unsigned long long>(limit));
  kv->finalize();
  std::printf("worker %d: ps window ok (peak %llu)\n", me, static_cast<unsigned long long>(st.peak_bytes_on_wire));
  return 0;
}

ChildMode window_mode("ps_window", window_child);

TEST(PsWindow, PushBytesOnTheWireStayWithinTheWindow) {
  // window, the most it allows: one chunk when the window is smaller than a chunk; with no
  // window, the ring slots bound it (2 servers x 8 slots x 64 KiB).
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"4K", "65536"}, {"128K", "131072"}, {"0", "1048576"}};
  for (const auto& [window, peak] : cases) {
    JobResult r = run_job(4, "ps_window",
                          {{"PLAIT_TIMEOUT", "60000"}, {"PS_SERVERS", "2"}, {"PLAIT_PS_WINDOW", window},
                           {"PLAIT_PS_PARTITION", "256K"}, {"PLAIT_PS_CHUNK", "64K"},
                           {"WANT_PEAK_MAX", peak}},
                          300);
    EXPECT_EQ(r.status, 0) << window << ": " << r.output;
    EXPECT_EQ(count_of(r.output, "ps window ok"), 2u) << window << ": " << r.output;
  }
}

// The push window shares the wire out over the servers: one chunk at a time (a window
// smaller than a chunk) and no window at all both deliver every push exactly once.
TEST(PsWindow, OneChunkAtATimeAndNoWindowBothServe) {
  for (const char* window : {"4K", "0"}) {
    JobResult r = run_job(5, "ps_bsp",
                          {{"PLAIT_TIMEOUT", "60000"}, {"PS_SERVERS", "2"}, {"PLAIT_PS_WINDOW", window},
                           {"PLAIT_PS_PARTITION", "256K"}, {"PLAIT_PS_CHUNK", "64K"}},
                          300);
    EXPECT_EQ(r.status, 0) << window << ": " << r.output;
    EXPECT_EQ(count_of(r.output, "ps bsp ok"), 3u) << window << ": " << r.output;
  }
}

TEST(PsBspOrder, AWorkerARoundAheadDoesNotBlockTheOthers) {
  for (const char* transport : {"shm", "tcp"}) {
    JobResult r = run_job(4, "ps_ahead", {{"PLAIT_TIMEOUT", "20000"}, {"PLAIT_TRANSPORT", transport}}, 300);
    EXPECT_EQ(r.status, 0) << transport << ": " << r.output;
    EXPECT_EQ(count_of(r.output, "ps ahead ok"), 3u) << transport << ": " << r.output;
  }
}

TEST(PsBspOrder, WorkersPushingKeysInOppositeOrdersNeverRunOutOfSlots) {
  for (const char* slots : {"1", "2", "8"}) {
    JobResult r = run_job(3, "ps_opposite", {{"PLAIT_TIMEOUT", "20000"}, {"PLAIT_PS_SLOTS", slots}}, 300);
    EXPECT_EQ(r.status, 0) << slots << " slots: " << r.output;
    EXPECT_EQ(count_of(r.output, "ps opposite ok"), 2u) << slots << " slots: " << r.output;
  }
}

}  // namespace
}  // namespace plait::testing
