// Threshold sparsification: every value with |x| >= threshold, as (index, value) pairs in
// index order. The wire's size follows the data (8 bytes an entry, at most one per value);
// error feedback lets small values add up until they cross the threshold.
#include <cmath>
#include <cstring>

#include "compress/compressors.h"

namespace plait::compress::detail {
namespace {

class ThresholdCompressor final : public Compressor {
 public:
  explicit ThresholdCompressor(const Params& params) : Compressor(Method::kThreshold, params) {}

  size_t max_wire_bytes(size_t count) const override { return count * sizeof(SparseEntry); }

  size_t compress(const float* in, size_t count, std::byte* wire, State* state) const override {
    check_indexable(method(), count);
    const float* src = corrected(in, count, state, method());
    float* resid = residual_of(state);
    const float t = params().threshold;
    size_t out = 0;
    for (size_t i = 0; i < count; ++i) {
      if (std::fabs(src[i]) >= t) put_entry(wire, &out, static_cast<uint32_t>(i), src[i], resid);
    }
    if (state) state->calls += 1;
    return out * sizeof(SparseEntry);
  }

  void decompress(const std::byte* wire, size_t bytes, float* out, size_t count,
                  bool accumulate) const override {
    scatter_entries(method(), wire, bytes, out, count, accumulate);
  }
};

}  // namespace

std::unique_ptr<Compressor> make_threshold(const Params& params) {
  return std::make_unique<ThresholdCompressor>(params);
}

}  // namespace plait::compress::detail
