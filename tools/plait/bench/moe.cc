#include "plait/bench/moe.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/half.h"
#include "plait/bench/options.h"
#include "plait/bench/subcommand.h"
#include "plait/communicator.h"
#include "plait/moe.h"
#include "plait/option_reader.h"

namespace plait::cli {
namespace {

using moe::Path;

// Rank r's routing: its tokens' top-k experts, distinct, drawn by the skew.
std::vector<int64_t> routing(const MoeBenchOptions& o, int rank) {
  std::mt19937_64 rng(0x6d6f65 + static_cast<uint64_t>(rank));
  std::vector<double> weight(o.experts, 1.0);
  if (o.zipf_s > 0)
    for (int e = 0; e < o.experts; ++e) weight[e] = 1.0 / std::pow(e + 1.0, o.zipf_s);
  std::vector<int64_t> idx(o.tokens * o.topk);
  for (size_t t = 0; t < o.tokens; ++t) {
    std::vector<double> w = weight;
    for (int j = 0; j < o.topk; ++j) {
      std::discrete_distribution<int> pick(w.begin(), w.end());
      const int e = pick(rng);
      idx[t * o.topk + j] = e;
      w[e] = 0;  // without replacement
    }
  }
  return idx;
}

// --check rows: element 0 the source rank, 1 and 2 the token number (exact in bf16 and f16).
float coded(int rank, size_t t, size_t j) {
  return j == 0 ? static_cast<float>(rank) : j == 1 ? static_cast<float>(t % 256) : j == 2 ? static_cast<float>(t / 256) : 1.0f;
}
void put(DataType dt, void* base, size_t i, float v) {
  if (dt == DataType::kF32) static_cast<float*>(base)[i] = v;
  else if (dt == DataType::kBF16) static_cast<uint16_t*>(base)[i] = float_to_bf16(v);
  else static_cast<_Float16*>(base)[i] = static_cast<_Float16>(v);
}
float get(DataType dt, const void* base, size_t i) {
  if (dt == DataType::kF32) return static_cast<const float*>(base)[i];
  if (dt == DataType::kBF16) return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
  return static_cast<float>(static_cast<const _Float16*>(base)[i]);
}

struct Stats {
  double min = 0, median = 0, max = 0;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.front(), v[v.size() / 2], v.back()};
}

// Rows that are wrong after a dispatch (every source's tokens with an expert here, in token
// order, carrying their code) and after a combine of those rows unchanged (each token back
// times the number of ranks that hold its experts).
long misplaced(const MoeBenchOptions& o, DataType dt, const moe::Dispatcher& d, const moe::Handle& h,
               const std::vector<std::vector<int64_t>>& routes, const void* recv_x, const void* out) {
  const int me = d.rank(), n = d.size(), per = o.experts / n;
  long bad = 0;
  size_t row = 0;
  for (int s = 0; s < n; ++s) {
    for (size_t t = 0; t < o.tokens; ++t) {
      bool here = false;
      for (int j = 0; j < o.topk; ++j) here |= routes[s][t * o.topk + j] / per == me;
      if (!here) continue;
      if (row >= h.num_recv()) return bad + 1;
      for (size_t j = 0; j < std::min<size_t>(o.hidden, 3); ++j)
        if (get(dt, recv_x, row * o.hidden + j) != coded(s, t, j)) {
          ++bad;
          break;
        }
      ++row;
    }
  }
  bad += static_cast<long>(h.num_recv() > row ? h.num_recv() - row : 0);
  for (size_t t = 0; t < o.tokens; ++t) {
    int ranks = 0;
    for (int r = 0; r < n; ++r) {
      bool holds = false;
      for (int j = 0; j < o.topk; ++j) holds |= routes[me][t * o.topk + j] / per == r;
      ranks += holds;
    }
    for (size_t j = 0; j < std::min<size_t>(o.hidden, 3); ++j)
      if (get(dt, out, t * o.hidden + j) != ranks * coded(me, t, j)) {
        ++bad;
        break;
      }
  }
  return bad;
}

int run(const MoeBenchOptions& o) {
  using namespace std::chrono_literals;
  auto bootstrap = bootstrap_from_env(60s);
  auto comm = Communicator::create(bootstrap, {.name = "bench-moe"});
  const int me = comm->rank(), n = comm->size();
  const DataType dt = *parse_dtype(o.dtype);
  moe::Dispatcher d(comm, bootstrap,
                    {.num_experts = o.experts, .topk = o.topk, .hidden = o.hidden, .dtype = dt,
                     .max_tokens = o.tokens, .name = "bench"});
  std::vector<std::vector<int64_t>> routes(n);
  for (int r = 0; r < n; ++r) routes[r] = routing(o, r);
  const std::vector<int64_t>& idx = routes[me];
  std::vector<float> weights(o.tokens * o.topk, 1.0f / static_cast<float>(o.topk));
  const size_t es = dtype_size(dt), row_bytes = o.hidden * es;
  std::vector<std::byte> x(o.tokens * row_bytes), out(o.tokens * row_bytes);
  std::vector<std::byte> recv(o.tokens * static_cast<size_t>(n) * row_bytes);
  for (size_t t = 0; t < o.tokens; ++t)
    for (size_t j = 0; j < o.hidden; ++j) put(dt, x.data(), t * o.hidden + j, o.check ? coded(me, t, j) : 0.5f);
  auto allocate = [&](size_t) { return moe::RecvBuffers{recv.data(), nullptr, nullptr}; };

  // Balance: rows each rank receives.
  double rows[2] = {0, 0};
  {
    auto call = d.dispatch(x.data(), idx.data(), weights.data(), o.tokens, allocate, Path::kAlltoallv);
    call->wait();
    const auto& h = *call->handle();
    rows[0] = rows[1] = static_cast<double>(h.num_recv());
    d.combine(call->handle(), recv.data(), nullptr, out.data(), nullptr, Path::kAlltoallv)->wait();
    // Bytes that crossed to other ranks, for GB/s.
    rows[1] = static_cast<double>(h.num_recv() - (h.recv_offsets()[me + 1] - h.recv_offsets()[me]));
  }
  double most = rows[0], sum[2] = {rows[0], rows[1]};
  comm->allreduce(&most, &most, 1, DataType::kF64, ReduceOp::kMax)->wait();
  comm->allreduce(sum, sum, 2, DataType::kF64, ReduceOp::kSum)->wait();
  const double mean = sum[0] / n, cross_bytes = sum[1] / n * static_cast<double>(row_bytes);

  std::vector<Path> paths;
  if (o.path == "all") paths = {Path::kAlltoallv, Path::kOneSided, Path::kAuto};
  else paths = {moe::parse_path(o.path)};
  if (me == 0) {
    std::printf("# plait bench moe: %d ranks, %zu tokens/rank, hidden %zu, %s, %d experts, top-%d, skew %s\n", n,
                o.tokens, o.hidden, o.dtype.c_str(), o.experts, o.topk, o.skew.c_str());
    std::printf("# rows received per rank: max %.0f, mean %.1f (max/mean %.2f); %.0f KiB from other ranks\n", most,
                mean, most / mean, cross_bytes / 1024);
    std::printf("# cost model: %s; picks %s (dispatch), %s (combine)\n", d.cost_summary().c_str(),
                std::string(moe::to_string(d.chosen_path(true, false))).c_str(),
                std::string(moe::to_string(d.chosen_path(false, true))).c_str());
    std::printf("# %-20s %9s %11s %11s %11s %9s\n", "path", "op", "min_us", "median_us", "max_us", "GB/s");
  }
  FILE* json = (me == 0 && !o.json_path.empty()) ? std::fopen(o.json_path.c_str(), "w") : nullptr;
  long wrong = 0;
  for (Path path : paths) {
    int iters = o.iters;
    if (iters == 0) {  // about a second
      const Clock::time_point start = Clock::now();
      auto call = d.dispatch(x.data(), idx.data(), weights.data(), o.tokens, allocate, path);
      call->wait();
      d.combine(call->handle(), recv.data(), nullptr, out.data(), nullptr, path)->wait();
      double s = seconds_since(start);
      comm->allreduce(&s, &s, 1, DataType::kF64, ReduceOp::kMax)->wait();
      iters = std::clamp(static_cast<int>(1.0 / std::max(s, 1e-6)), 5, 200);
    }
    std::vector<double> times(2 * static_cast<size_t>(iters));
    std::string ran[2];
    for (int i = -o.warmup; i < iters; ++i) {
      comm->barrier()->wait();
      const Clock::time_point t0 = Clock::now();
      auto call = d.dispatch(x.data(), idx.data(), weights.data(), o.tokens, allocate, path);
      call->wait();
      const Clock::time_point t1 = Clock::now();
      auto back = d.combine(call->handle(), recv.data(), nullptr, out.data(), nullptr, path);
      back->wait();
      const Clock::time_point t2 = Clock::now();
      ran[0] = moe::to_string(call->path());
      ran[1] = moe::to_string(back->path());
      if (i < 0) continue;
      times[2 * i] = std::chrono::duration<double>(t1 - t0).count();
      times[2 * i + 1] = std::chrono::duration<double>(t2 - t1).count();
      if (o.check && i == iters - 1) wrong += misplaced(o, dt, d, *call->handle(), routes, recv.data(), out.data());
    }
    comm->allreduce(times.data(), times.data(), times.size(), DataType::kF64, ReduceOp::kMax)->wait();
    for (int op = 0; op < 2; ++op) {
      std::vector<double> v;
      for (int i = 0; i < iters; ++i) v.push_back(times[2 * i + op]);
      const Stats s = stats(v);
      const std::string label = path == Path::kAuto ? "auto (" + ran[op] + ")" : ran[op];
      const char* opname = op == 0 ? "dispatch" : "combine";
      if (me == 0) {
        std::printf("  %-20s %9s %11.1f %11.1f %11.1f %9.3f\n", label.c_str(), opname, s.min * 1e6, s.median * 1e6,
                    s.max * 1e6, cross_bytes / s.median / 1e9);
        if (json)
          std::fprintf(json,
                       "{\"path\":\"%s\",\"ran\":\"%s\",\"op\":\"%s\",\"ranks\":%d,\"tokens\":%zu,\"hidden\":%zu,"
                       "\"dtype\":\"%s\",\"experts\":%d,\"topk\":%d,\"skew\":\"%s\",\"iters\":%d,\"min_us\":%.2f,"
                       "\"median_us\":%.2f,\"max_us\":%.2f,\"gbps\":%.4f,\"max_over_mean\":%.4f}\n",
                       std::string(moe::to_string(path)).c_str(), ran[op].c_str(), opname, n, o.tokens, o.hidden,
                       o.dtype.c_str(), o.experts, o.topk, o.skew.c_str(), iters, s.min * 1e6, s.median * 1e6,
                       s.max * 1e6, cross_bytes / s.median / 1e9, most / mean);
      }
    }
  }
  if (json) std::fclose(json);
  if (o.check) {
    comm->allreduce(&wrong, &wrong, 1, DataType::kI64, ReduceOp::kSum)->wait();
    if (me == 0) std::printf("# Misplaced tokens: %ld\n", wrong);
  }
  std::fflush(stdout);
  return wrong > 0 ? 1 : 0;
}

}  // namespace

MoeBenchOptions parse_moe_bench_args(const std::vector<std::string>& args) {
  MoeBenchOptions o;
  OptionReader in(args);
  while (in.next()) {
    const std::string& arg = in.name();
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      continue;
    }
    if (arg == "-n") {
      o.nranks = in.integer(1);
      continue;
    }
    if (arg == "--tokens") {
      o.tokens = static_cast<size_t>(in.integer(1));
    } else if (arg == "--hidden") {
      o.hidden = static_cast<size_t>(in.integer(1));
    } else if (arg == "--experts") {
      o.experts = in.integer(1);
    } else if (arg == "--topk") {
      o.topk = in.integer(1);
    } else if (arg == "--dtype") {
      o.dtype = in.value();
      const auto dt = parse_dtype(o.dtype);
      if (!dt || (*dt != DataType::kF32 && *dt != DataType::kF16 && *dt != DataType::kBF16))
        throw invalid_usage("--dtype is f32, f16 or bf16, not '" + o.dtype + "'");
    } else if (arg == "--skew") {
      o.skew = in.value();
      if (o.skew.rfind("zipf:", 0) == 0) {
        char* end = nullptr;
        o.zipf_s = std::strtod(o.skew.c_str() + 5, &end);
        if (*end != '\0' || !(o.zipf_s > 0)) throw invalid_usage("--skew zipf:S needs S > 0, not '" + o.skew + "'");
      } else if (o.skew != "uniform") {
        throw invalid_usage("--skew is uniform or zipf:S, not '" + o.skew + "'");
      }
    } else if (arg == "--path") {
      o.path = in.value();
      if (o.path != "all") moe::parse_path(o.path);
    } else if (arg == "--iters") {
      o.iters = in.integer(1);
    } else if (arg == "--warmup") {
      o.warmup = in.integer(0);
    } else if (arg == "--check") {
      o.check = true;
    } else if (arg == "--json") {
      o.json_path = in.value();
    } else {
      in.unknown();
    }
    for (std::string& a : in.taken()) o.forwarded_args.push_back(std::move(a));
  }
  if (o.topk > o.experts) throw invalid_usage("--topk is larger than --experts");
  return o;
}

std::string moe_bench_usage() {
  return "usage: plait bench [-n N] moe [options]\n"
         "Expert-parallel dispatch and combine (plait/moe.h): time per call, the slowest rank's.\n"
         "  --tokens T    tokens per rank (default 4096)\n"
         "  --hidden H    elements per token (default 1024)\n"
         "  --experts E   experts across the ranks, a multiple of them (default 16)\n"
         "  --topk K      experts per token (default 2)\n"
         "  --dtype D     bf16 (default), f16 or f32\n"
         "  --skew S      uniform (default) or zipf:S (expert e drawn with weight 1/(e+1)^S)\n"
         "  --path P      all (default: both paths, then the cost model's), auto, alltoallv, one-sided\n"
         "  --iters N     timed calls (default: about a second, 5 to 200)\n"
         "  --warmup N    untimed calls first (default 3)\n"
         "  --check       verify every token's rows at its experts' ranks and after combine\n"
         "  --json FILE   also write one JSON object per path and op to FILE\n";
}

int moe_bench_main(const std::vector<std::string>& args) {
  return bench_subcommand_main("moe", args, &parse_moe_bench_args, &moe_bench_usage, &run);
}

}  // namespace plait::cli
