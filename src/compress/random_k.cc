// Random-k sparsification: the values split into k equal strata and one value drawn from
// each, so every value is as likely to go and no two draws collide. The indices are not sent:
// the wire carries the draw's 64-bit seed and the k values in stratum order, and the receiver
// draws the same indices. Ranks that share the seed (the same Params and the same call count)
// draw the same indices, so their wires can be summed value by value. Wire: 8 + 4k bytes.
#include <cstring>

#include "compress/compressors.h"
#include "compress/kernels.h"

namespace plait::compress::detail {
namespace {

// The index drawn in stratum j of k over n values.
inline size_t drawn(uint64_t seed, size_t j, size_t k, size_t n) {
  const auto lo = static_cast<size_t>(static_cast<unsigned __int128>(j) * n / k);
  const auto hi = static_cast<size_t>(static_cast<unsigned __int128>(j + 1) * n / k);
  return lo + kernels::mix64(seed + j) % (hi - lo);
}

class RandomKCompressor final : public Compressor {
 public:
  explicit RandomKCompressor(const Params& params) : Compressor(Method::kRandomK, params) {}

  size_t max_wire_bytes(size_t count) const override {
    return count == 0 ? 0 : 8 + 4 * k_of(method(), params(), count);
  }

  size_t compress(const float* in, size_t count, std::byte* wire, State* state) const override {
    if (count == 0) return 0;
    const size_t k = k_of(method(), params(), count);
    const float* src = corrected(in, count, state, method());
    float* resid = residual_of(state);
    const uint64_t seed = call_noise(params(), state);
    std::memcpy(wire, &seed, 8);
    auto* values = wire + 8;
    for (size_t j = 0; j < k; ++j) {
      const size_t i = drawn(seed, j, k, count);
      std::memcpy(values + 4 * j, &src[i], 4);
      if (resid) resid[i] = 0.0f;
    }
    if (state) state->calls += 1;
    return 8 + 4 * k;
  }

  void decompress(const std::byte* wire, size_t bytes, float* out, size_t count,
                  bool accumulate) const override {
    check_wire(method(), bytes, max_wire_bytes(count), count);
    if (count == 0) return;
    const size_t k = k_of(method(), params(), count);
    uint64_t seed;
    std::memcpy(&seed, wire, 8);
    if (!accumulate) std::memset(out, 0, count * sizeof(float));
    for (size_t j = 0; j < k; ++j) {
      float v;
      std::memcpy(&v, wire + 8 + 4 * j, 4);
      out[drawn(seed, j, k, count)] += v;
    }
  }
};

}  // namespace

std::unique_ptr<Compressor> make_random_k(const Params& params) {
  return std::make_unique<RandomKCompressor>(params);
}

}  // namespace plait::compress::detail
