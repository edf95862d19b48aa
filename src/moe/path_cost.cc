#include "moe/path_cost.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/clock.h"

namespace plait::moe {
namespace {

constexpr int kWarmup = 2;
constexpr int kTimed = 7;
constexpr size_t kProbeRows = 256;  // R at most: rows to each peer in the larger probe
// The one-sided path must win by this much: the fit is noisy, and the alltoallv path needs no
// windows' worth of memory traffic.
constexpr double kMargin = 0.9;

template <typename Run>
double median_seconds(Run&& run) {
  std::vector<double> t;
  for (int i = 0; i < kWarmup + kTimed; ++i) {
    const Clock::time_point start = Clock::now();
    run();
    if (i >= kWarmup) t.push_back(seconds_since(start));
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

// Seconds of a fresh dispatch, a repeated one and a combine on `path`, with `per_peer` rows
// to every other rank (token i goes to the rank i mod (n-1) after this one).
void time_calls(Dispatcher& d, Path path, size_t per_peer, double out[3]) {
  const DispatcherOptions& o = d.options();
  const int n = d.size(), me = d.rank(), per_rank = o.num_experts / n;
  const size_t tokens = std::min(per_peer * static_cast<size_t>(n - 1), o.max_tokens);
  std::vector<int64_t> idx(std::max<size_t>(tokens, 1) * o.topk, -1);
  for (size_t t = 0; t < tokens; ++t)
    idx[t * o.topk] = static_cast<int64_t>((me + 1 + static_cast<int>(t % (n - 1))) % n) * per_rank;
  const size_t row_bytes = o.hidden * dtype_size(o.dtype);
  std::vector<std::byte> x(std::max<size_t>(tokens, 1) * row_bytes), y(x.size());
  std::vector<std::byte> recv(std::max<size_t>(tokens, 1) * static_cast<size_t>(n) * row_bytes);
  auto allocate = [&](size_t) { return RecvBuffers{recv.data(), nullptr, nullptr}; };
  std::shared_ptr<const Handle> handle;
  out[0] = median_seconds([&] {
    auto call = d.dispatch(x.data(), idx.data(), nullptr, tokens, allocate, path);
    call->wait();
    handle = call->handle();
  });
  out[1] = median_seconds([&] { d.dispatch(handle, x.data(), recv.data(), path)->wait(); });
  out[2] = median_seconds([&] { d.combine(handle, recv.data(), nullptr, y.data(), nullptr, path)->wait(); });
}

}  // namespace

Path PathCosts::pick(CallKind kind) const {
  const int k = static_cast<int>(kind);
  return one_sided[k].at(expected_rows) < kMargin * alltoallv[k].at(expected_rows) ? Path::kOneSided
                                                                                   : Path::kAlltoallv;
}

std::string PathCosts::summary() const {
  char line[400];
  std::snprintf(line, sizeof line,
                "us at %.0f rows a peer, alltoallv/one-sided: dispatch %.1f/%.1f, repeat %.1f/%.1f, combine "
                "%.1f/%.1f (fitted at 1 and %.0f rows)",
                expected_rows, alltoallv[0].at(expected_rows) * 1e6, one_sided[0].at(expected_rows) * 1e6,
                alltoallv[1].at(expected_rows) * 1e6, one_sided[1].at(expected_rows) * 1e6,
                alltoallv[2].at(expected_rows) * 1e6, one_sided[2].at(expected_rows) * 1e6, probe_rows);
  return line;
}

PathCosts measure_path_costs(Dispatcher& dispatcher, Communicator& comm) {
  PathCosts c;
  const DispatcherOptions& o = dispatcher.options();
  const int n = dispatcher.size();
  // A full dispatch, routed evenly: every token reaches min(topk, ranks) ranks.
  c.expected_rows = static_cast<double>(o.max_tokens) * std::min(o.topk, n) / n;
  if (n == 1) return c;  // nothing travels: either path will do
  // The larger probe as near a full dispatch as kProbeRows allows: the fit extrapolates less.
  const size_t big = std::clamp<size_t>(std::min(o.max_tokens / static_cast<size_t>(n - 1),
                                                 static_cast<size_t>(c.expected_rows)),
                                        1, kProbeRows);
  c.probe_rows = static_cast<double>(big);
  // [path][size][kind]
  double t[2][2][3];
  for (int p = 0; p < 2; ++p) {
    const Path path = p == 0 ? Path::kAlltoallv : Path::kOneSided;
    time_calls(dispatcher, path, 1, t[p][0]);
    time_calls(dispatcher, path, big, t[p][1]);
  }
  // Every rank the slowest one's numbers, so that every rank picks the same path.
  comm.allreduce(&t[0][0][0], &t[0][0][0], 12, DataType::kF64, ReduceOp::kMax)->wait();
  for (int k = 0; k < 3; ++k) {
    for (int p = 0; p < 2; ++p) {
      PathCosts::Line& line = p == 0 ? c.alltoallv[k] : c.one_sided[k];
      line.beta = big > 1 ? std::max(0.0, (t[p][1][k] - t[p][0][k]) / static_cast<double>(big - 1)) : 0.0;
      line.alpha = std::max(0.0, t[p][0][k] - line.beta);
    }
  }
  return c;
}

}  // namespace plait::moe
