// Fitting the alpha-beta model t(n) = alpha + n / beta to measured message times.
//
// Used by `plait tune`; here rather than in the tool so that the fit is unit-tested and any
// future measurement (a provider timing itself at start-up) gets the same rules.
#pragma once

#include <cstddef>
#include <span>

namespace plait::transport {

// One measured one-way time of an n-byte message.
struct LatencySample {
  size_t bytes = 0;
  double seconds = 0;
};

struct LinkFit {
  double alpha_us = 0;           // > 0
  double beta_bytes_per_us = 0;  // > 0
  size_t sizes = 0;              // distinct message sizes the fit used
  size_t samples = 0;            // samples it was given
};

// The model's limits: a fit never yields a latency below kMinAlphaUs or a bandwidth outside
// [kMinBetaBytesPerUs, kMaxBetaBytesPerUs]; noise must not turn into a free or infinitely
// fast link that the algorithm selection would then trust.
inline constexpr double kMinAlphaUs = 0.01;           // 10 ns
inline constexpr double kMinBetaBytesPerUs = 1.0;     // 1 MB/s
inline constexpr double kMaxBetaBytesPerUs = 1.0e6;   // 1 TB/s

// Least squares over the per-size medians (a median per size shrugs off the outliers that
// preemption and page faults produce), weighted by 1 / t^2 so that every size counts by its
// relative error: a small message pins alpha and a large one beta, where unweighted least
// squares would let the microseconds of noise on a 4 MiB transfer swamp a 1 us alpha. Then a
// few rounds of Cauchy reweighting by relative residual, so that a size that is off as a
// whole (load on a shared host during its turn, a protocol switch) does not tilt the line.
// Negative or zero estimates (possible with noisy samples) fall back to what the extreme
// sizes imply, then to the limits above. Throws Error(kInvalidUsage) with fewer than two
// distinct sizes or a sample that is not a positive finite time.
LinkFit fit_alpha_beta(std::span<const LatencySample> samples);

// The median of `values` (the mean of the middle two for an even count); 0 when empty.
// Reorders `values`.
double median(std::span<double> values);

}  // namespace plait::transport
