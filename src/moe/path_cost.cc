#include "moe/path_cost.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/clock.h"

namespace plait::moe {
namespace {

constexpr int kWarmup = 2;
constexpr int kTimed = 7;

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

double copy_rate() {
  std::vector<std::byte> a(size_t{4} << 20, std::byte{1}), b(a.size());
  const double s = median_seconds([&] { std::memcpy(b.data(), a.data(), a.size()); });
  return static_cast<double>(a.size()) / std::max(s, 1e-9);
}

}  // namespace

Path PathCosts::pick(CallKind kind) const {
  const int k = static_cast<int>(kind);
  // The one-sided dispatch copies its rows out of the window; a combine sums them from
  // wherever they landed on both paths.
  const double copy = kind == CallKind::kCombine ? 0.0 : expected_recv_bytes / copy_bytes_per_s;
  return one_sided[k] + copy < alltoallv[k] ? Path::kOneSided : Path::kAlltoallv;
}

std::string PathCosts::summary() const {
  char line[320];
  std::snprintf(line, sizeof line,
                "fixed cost (us) alltoallv/one-sided: dispatch %.1f/%.1f, repeat %.1f/%.1f, combine %.1f/%.1f; "
                "copy out %.1f us for %.0f KiB",
                alltoallv[0] * 1e6, one_sided[0] * 1e6, alltoallv[1] * 1e6, one_sided[1] * 1e6,
                alltoallv[2] * 1e6, one_sided[2] * 1e6, expected_recv_bytes / copy_bytes_per_s * 1e6,
                expected_recv_bytes / 1024);
  return line;
}

PathCosts measure_path_costs(Dispatcher& dispatcher, Communicator& comm) {
  PathCosts c;
  const DispatcherOptions& o = dispatcher.options();
  const int n = dispatcher.size();
  // A full dispatch: every token reaches min(topk, ranks) ranks, (n-1)/n of them elsewhere.
  c.expected_recv_bytes = static_cast<double>(o.max_tokens) * std::min(o.topk, n) * (n - 1) / n *
                          static_cast<double>(o.hidden * dtype_size(o.dtype));
  // One row to each other rank (as far as max_tokens allows): calls without rows would
  // measure nothing, since a collective with nothing to move returns at once.
  const int me = dispatcher.rank();
  const int per_rank = o.num_experts / n;
  const size_t tokens = std::min<size_t>(static_cast<size_t>(n - 1), o.max_tokens);
  std::vector<int64_t> idx(std::max<size_t>(tokens, 1) * o.topk, -1);
  for (size_t t = 0; t < tokens; ++t)
    idx[t * o.topk] = static_cast<int64_t>((me + 1 + static_cast<int>(t)) % n) * per_rank;
  const size_t row_bytes = o.hidden * dtype_size(o.dtype);
  std::vector<std::byte> x(std::max<size_t>(tokens, 1) * row_bytes), out(x.size());
  std::vector<std::byte> recv(std::max<size_t>(n, 1) * row_bytes);
  auto allocate = [&](size_t) { return RecvBuffers{recv.data(), nullptr, nullptr}; };
  for (Path p : {Path::kAlltoallv, Path::kOneSided}) {
    double* t = p == Path::kAlltoallv ? c.alltoallv : c.one_sided;
    std::shared_ptr<const Handle> handle;
    t[0] = median_seconds([&] {
      auto call = dispatcher.dispatch(x.data(), idx.data(), nullptr, tokens, allocate, p);
      call->wait();
      handle = call->handle();
    });
    t[1] = median_seconds([&] { dispatcher.dispatch(handle, x.data(), recv.data(), p)->wait(); });
    t[2] = median_seconds([&] { dispatcher.combine(handle, recv.data(), nullptr, out.data(), nullptr, p)->wait(); });
  }
  // Every rank the slowest one's numbers, so that every rank picks the same path.
  double v[7] = {c.alltoallv[0], c.alltoallv[1], c.alltoallv[2], c.one_sided[0], c.one_sided[1],
                 c.one_sided[2], 1.0 / copy_rate()};
  comm.allreduce(v, v, 7, DataType::kF64, ReduceOp::kMax)->wait();
  for (int k = 0; k < 3; ++k) {
    c.alltoallv[k] = v[k];
    c.one_sided[k] = v[3 + k];
  }
  c.copy_bytes_per_s = 1.0 / v[6];
  return c;
}

}  // namespace plait::moe
