#include "transport/cost_fit.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "plait/error.h"

namespace plait::transport {
namespace {

constexpr int kRobustRounds = 3;
// 2.385 is the Cauchy tuning constant for 95% efficiency, 1.4826 turns a median absolute
// deviation into a standard deviation.
constexpr double kCauchyScale = 2.385 * 1.4826;

// Weighted least squares of y = a + b x; b = 0 when the xs do not determine a slope.
std::pair<double, double> weighted_line(const std::vector<double>& xs,
                                        const std::vector<double>& ys,
                                        const std::vector<double>& w) {
  double s = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    s += w[i];
    sx += w[i] * xs[i];
    sy += w[i] * ys[i];
    sxx += w[i] * xs[i] * xs[i];
    sxy += w[i] * xs[i] * ys[i];
  }
  const double det = s * sxx - sx * sx;
  const double b = det > 0 ? (s * sxy - sx * sy) / det : 0;  // us per byte
  return {(sy - b * sx) / s, b};
}

}  // namespace

double median(std::span<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + mid);
  return (lower + upper) / 2;
}

LinkFit fit_alpha_beta(std::span<const LatencySample> samples) {
  const ErrorContext ctx{.op = "alpha-beta fit"};
  std::map<size_t, std::vector<double>> by_size;  // bytes -> times in us
  for (const LatencySample& s : samples) {
    if (!std::isfinite(s.seconds) || s.seconds <= 0)
      throw invalid_usage("a " + std::to_string(s.bytes) + "-byte sample has time " +
                              std::to_string(s.seconds) + " s; times must be positive",
                          ctx);
    by_size[s.bytes].push_back(s.seconds * 1e6);
  }
  if (by_size.size() < 2)
    throw invalid_usage("fitting alpha and beta needs samples of at least two message sizes, got " +
                            std::to_string(by_size.size()),
                        ctx);

  std::vector<double> xs, ys;
  for (auto& [bytes, times] : by_size) {
    xs.push_back(static_cast<double>(bytes));
    ys.push_back(median(times));
  }
  std::vector<double> w(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) w[i] = 1.0 / (ys[i] * ys[i]);
  double a = 0, b = 0;
  std::tie(a, b) = weighted_line(xs, ys, w);
  // A whole size can be off (a burst of load on a shared host, a protocol switch): Cauchy
  // reweighting by the relative residual, scaled by its median, lets such points count less.
  for (int round = 0; round < kRobustRounds; ++round) {
    std::vector<double> r(xs.size()), abs_r(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) {
      r[i] = (ys[i] - (a + b * xs[i])) / ys[i];
      abs_r[i] = std::abs(r[i]);
    }
    const double scale = std::max(kCauchyScale * median(abs_r), 1e-3);
    for (size_t i = 0; i < xs.size(); ++i)
      w[i] = 1.0 / (ys[i] * ys[i]) / (1.0 + (r[i] / scale) * (r[i] / scale));
    std::tie(a, b) = weighted_line(xs, ys, w);
  }

  // Noise can tilt the line the wrong way: fall back to the slope between the smallest and
  // the largest size, then to the largest size's plain throughput (an upper bound on b).
  const double x0 = xs.front(), y0 = ys.front(), x1 = xs.back(), y1 = ys.back();
  if (!(b > 0)) b = (y1 - y0) / (x1 - x0);
  if (!(b > 0)) b = y1 / x1;
  if (!(a > 0)) a = y0 - b * x0;

  LinkFit fit;
  fit.alpha_us = std::max(a, kMinAlphaUs);
  fit.beta_bytes_per_us = std::clamp(1.0 / b, kMinBetaBytesPerUs, kMaxBetaBytesPerUs);
  fit.sizes = by_size.size();
  fit.samples = samples.size();
  return fit;
}

}  // namespace plait::transport
