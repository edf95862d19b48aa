// Top-k sparsification (DGC-style): the k values of largest magnitude, as (index, value)
// pairs in index order; error feedback keeps the rest for later steps. The k-th magnitude is
// found on a sample first (DGC's trick): one pass then collects the few candidates above the
// sample's threshold, and only they are ranked exactly, so the cost is one streaming pass
// rather than a selection over every value. Wire: exactly k entries of 8 bytes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "compress/compressors.h"
#include "compress/kernels.h"

namespace plait::compress::detail {
namespace {

// Below this many values, or when k is a large share of them, every value is a candidate.
constexpr size_t kRankAllBelow = size_t{1} << 16;
constexpr size_t kSample = size_t{1} << 15;

// The k-th largest of `mags` (k >= 1), reordering them.
float kth_largest(std::vector<float>& mags, size_t k) {
  std::nth_element(mags.begin(), mags.begin() + static_cast<std::ptrdiff_t>(k - 1), mags.end(),
                   std::greater<float>());
  return mags[k - 1];
}

// Indices, in order, of a superset of the k largest |src[i]|, and the k-th largest magnitude.
struct Candidates {
  std::vector<uint32_t> index;
  float kth = 0.0f;
};

Candidates candidates(const float* src, size_t n, size_t k, uint64_t noise) {
  Candidates c;
  std::vector<float> mags;
  if (n > kRankAllBelow && k * 8 <= n) {
    // A sample of kSample magnitudes, one per stratum: its rank for a share a little above
    // k/n gives a threshold just below the true one, and one pass keeps what is above it.
    std::vector<float> sample(kSample);
    for (size_t s = 0; s < kSample; ++s) {
      const size_t lo = s * n / kSample, hi = (s + 1) * n / kSample;
      sample[s] = std::fabs(src[lo + kernels::mix64(noise + s) % (hi - lo)]);
    }
    for (double headroom : {1.5, 4.0}) {
      const auto rank = std::min(
          kSample, static_cast<size_t>(std::ceil(headroom * static_cast<double>(kSample * k) / static_cast<double>(n))) + 16);
      std::vector<float> ranked = sample;
      const float below = kth_largest(ranked, rank);
      // Room for twice the expected count: a sample that misjudged by more falls back.
      const size_t room = 2 * (static_cast<size_t>(headroom * static_cast<double>(k)) + 1024);
      c.index.resize(room);
      size_t m = 0;
      for (size_t i = 0; i < n && m < room; ++i) {
        if (std::fabs(src[i]) >= below) c.index[m++] = static_cast<uint32_t>(i);
      }
      if (m >= room || m < k) continue;
      c.index.resize(m);
      mags.resize(m);
      for (size_t j = 0; j < m; ++j) mags[j] = std::fabs(src[c.index[j]]);
      c.kth = kth_largest(mags, k);
      return c;
    }
  }
  c.index.resize(n);
  mags.resize(n);
  for (size_t i = 0; i < n; ++i) {
    c.index[i] = static_cast<uint32_t>(i);
    mags[i] = std::fabs(src[i]);
  }
  c.kth = kth_largest(mags, k);
  return c;
}

class TopKCompressor final : public Compressor {
 public:
  explicit TopKCompressor(const Params& params) : Compressor(Method::kTopK, params) {}

  size_t max_wire_bytes(size_t count) const override {
    return count == 0 ? 0 : k_of(method(), params(), count) * sizeof(SparseEntry);
  }

  size_t compress(const float* in, size_t count, std::byte* wire, State* state) const override {
    if (count == 0) return 0;
    check_indexable(method(), count);
    const size_t k = k_of(method(), params(), count);
    const float* src = corrected(in, count, state, method());
    float* resid = residual_of(state);
    const Candidates c = candidates(src, count, k, call_noise(params(), state));
    // Everything above the k-th magnitude goes, and as many equal to it as k leaves room for.
    size_t above = 0;
    for (uint32_t i : c.index) above += std::fabs(src[i]) > c.kth;
    size_t ties = k - above, out = 0;
    for (uint32_t i : c.index) {
      const float a = std::fabs(src[i]);
      if (a > c.kth || (a == c.kth && ties > 0)) {
        if (!(a > c.kth)) --ties;
        put_entry(wire, &out, i, src[i], resid);
      }
    }
    if (state) state->calls += 1;
    return out * sizeof(SparseEntry);
  }

  void decompress(const std::byte* wire, size_t bytes, float* out, size_t count,
                  bool accumulate) const override {
    check_wire(method(), bytes, max_wire_bytes(count), count);
    scatter_entries(method(), wire, bytes, out, count, accumulate);
  }
};

}  // namespace

std::unique_ptr<Compressor> make_top_k(const Params& params) {
  return std::make_unique<TopKCompressor>(params);
}

}  // namespace plait::compress::detail
