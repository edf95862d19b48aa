#include "plait/bench/compress.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "core/clock.h"
#include "core/config.h"
#include "plait/bench/options.h"
#include "plait/compress.h"
#include "plait/error.h"
#include "plait/option_reader.h"

namespace plait::cli {
namespace {

struct Options {
  size_t min_bytes = size_t{1} << 20;
  size_t max_bytes = size_t{64} << 20;
  double factor = 4.0;
  std::vector<compress::Method> methods{std::begin(compress::kAllMethods), std::end(compress::kAllMethods)};
  compress::Params params{.threshold = 2.576f};  // about 1 % of N(0, 1) values
  int iters = 0;  // 0: as many as fit in about 0.2 s, at least 3
  std::string json_path;
  bool help = false;
};

Options parse(const std::vector<std::string>& args) {
  Options o;
  OptionReader in(args);
  while (in.next()) {
    const std::string& arg = in.name();
    if (arg == "-h" || arg == "--help") o.help = true;
    else if (arg == "--min") o.min_bytes = in.bytes();
    else if (arg == "--max") o.max_bytes = in.bytes();
    else if (arg == "--factor") o.factor = in.factor();
    else if (arg == "--iters") o.iters = in.integer(1);
    else if (arg == "--json") o.json_path = in.value();
    else if (arg == "--ratio") o.params.ratio = in.number();
    else if (arg == "--rank") o.params.rank = in.integer(1);
    else if (arg == "--levels") o.params.levels = in.integer(1);
    else if (arg == "--chunk") o.params.chunk = in.bytes();
    else if (arg == "--threshold") o.params.threshold = static_cast<float>(in.number());
    else if (arg == "--methods") {
      o.methods.clear();
      const std::string list = in.value();
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        o.methods.push_back(compress::parse_method(list.substr(at, comma - at)));
        at = comma + 1;
      }
    } else {
      in.unknown();
    }
  }
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes || o.factor <= 1.0)
    throw invalid_usage("--min must be at least 4 bytes, --max at least --min, --factor above 1");
  return o;
}

// Seconds per call of `f`, the median of the runs; `setup` runs before each, untimed.
template <typename S, typename F>
double median_seconds(int iters, S&& setup, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    setup();
    const Clock::time_point start = Clock::now();
    f();
    t.push_back(seconds_since(start));
  }
  std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

int run(const Options& o) {
  std::unique_ptr<std::FILE, decltype(&std::fclose)> json(nullptr, &std::fclose);
  if (!o.json_path.empty()) {
    json.reset(std::fopen(o.json_path.c_str(), "w"));
    if (!json) throw system_error("--json: cannot write '" + o.json_path + "'", errno);
  }
  const std::vector<size_t> sizes = size_sweep(o.min_bytes, o.max_bytes, o.factor);
  std::mt19937 rng(42);
  std::normal_distribution<float> normal;
  std::vector<float> grad(o.max_bytes / 4);
  for (float& x : grad) x = normal(rng);
  std::printf("# plait bench compress: f32 N(0,1) values, one core; GB/s of f32 input, median of the runs\n");
  std::printf("# params: levels %d, chunk %zu, ratio %g, threshold %g, rank %d\n", o.params.levels,
              o.params.chunk, o.params.ratio, static_cast<double>(o.params.threshold), o.params.rank);
  std::printf("# %-9s %12s %12s %8s %10s %10s %11s %11s\n", "method", "bytes", "wire", "ratio",
              "compress", "+feedback", "decompress", "round trip");
  std::vector<std::byte> wire;
  std::vector<float> out(grad.size());
  for (compress::Method m : o.methods) {
    auto c = compress::Compressor::create(m, o.params);
    for (size_t bytes : sizes) {
      const size_t n = bytes / 4;
      wire.resize(c->max_wire_bytes(n));
      size_t wire_bytes = c->compress(grad.data(), n, wire.data(), nullptr);
      const Clock::time_point probe = Clock::now();
      c->decompress(wire.data(), wire_bytes, out.data(), n);
      const int iters = o.iters > 0 ? o.iters : std::clamp(static_cast<int>(0.05 / std::max(1e-7, seconds_since(probe))), 3, 50);
      auto none = [] {};
      const double plain = median_seconds(iters, none, [&] { wire_bytes = c->compress(grad.data(), n, wire.data(), nullptr); });
      // Every timed call with feedback is a second step: the state as one call left it (the
      // same gradient added again and again would grow the residual, and a threshold's wire).
      compress::State after_one, state;
      c->compress(grad.data(), n, wire.data(), &after_one);
      const double feedback = median_seconds(iters, [&] { state = after_one; },
                                             [&] { wire_bytes = c->compress(grad.data(), n, wire.data(), &state); });
      // Decompress the wire of a call without feedback (the one whose size is reported).
      wire_bytes = c->compress(grad.data(), n, wire.data(), nullptr);
      const double decode = median_seconds(iters, none, [&] { c->decompress(wire.data(), wire_bytes, out.data(), n); });
      const double in = static_cast<double>(n) * 4;
      std::printf("  %-9s %12zu %12zu %7.1fx %10.2f %10.2f %11.2f %11.2f\n",
                  std::string(compress::to_string(m)).c_str(), n * 4, wire_bytes,
                  in / static_cast<double>(std::max<size_t>(1, wire_bytes)), in / plain / 1e9,
                  in / feedback / 1e9, in / decode / 1e9, in / (feedback + decode) / 1e9);
      std::fflush(stdout);
      if (json)
        std::fprintf(json.get(),
                     "{\"method\":\"%s\",\"bytes\":%zu,\"wire_bytes\":%zu,\"compress_gbps\":%.4f,"
                     "\"compress_feedback_gbps\":%.4f,\"decompress_gbps\":%.4f,\"round_trip_gbps\":%.4f}\n",
                     std::string(compress::to_string(m)).c_str(), n * 4, wire_bytes, in / plain / 1e9,
                     in / feedback / 1e9, in / decode / 1e9, in / (feedback + decode) / 1e9);
    }
  }
  return 0;
}

}  // namespace

std::string compress_bench_usage() {
  return "usage: plait bench compress [options]\n"
         "  every compressor on one core: compress (without and with error feedback),\n"
         "  decompress and both, in GB/s of f32 input; the wire's bytes and the ratio\n"
         "  --min B --max B    sizes in bytes (default 1M .. 64M), K/M/G suffixes\n"
         "  --factor F         size step (default 4)\n"
         "  --methods a,b      fp16, bf16, int8, sign, topk, threshold, randomk, powersgd (default all)\n"
         "  --ratio R          topk, randomk: the share of values sent (default 0.01)\n"
         "  --threshold T      threshold: |x| >= T is sent (default 2.576: about 1 %)\n"
         "  --levels S         int8: levels per sign (default 127)\n"
         "  --chunk N          int8, sign: values per scale (default 1024)\n"
         "  --rank R           powersgd: the rank (default 4)\n"
         "  --iters N          runs per measurement (default: about 50 ms of them, 3..50)\n"
         "  --json PATH        one JSON object per method and size\n";
}

int compress_bench_main(const std::vector<std::string>& args) {
  try {
    const Options o = parse(args);
    if (o.help) {
      std::fputs(compress_bench_usage().c_str(), stdout);
      return 0;
    }
    return run(o);
  } catch (const Error& e) {
    std::fprintf(stderr, "plait bench compress: %s\n(plait bench compress --help for usage)\n", e.what());
    return 2;
  }
}

}  // namespace plait::cli
