// int8, QSGD-style: the values in chunks of `chunk`, each with a scale (its largest |x|) and
// every value stochastically rounded to one of `levels` steps per sign, so that the rounding
// is unbiased: E[q * scale / levels] = x. Wire: the chunks' f32 scales, then one int8 a value.
#include "compress/compressors.h"
#include "compress/kernels.h"

namespace plait::compress::detail {
namespace {

class Int8Compressor final : public Compressor {
 public:
  explicit Int8Compressor(const Params& params) : Compressor(Method::kInt8, params) {}

  size_t chunks(size_t count) const { return (count + params().chunk - 1) / params().chunk; }
  size_t max_wire_bytes(size_t count) const override { return chunks(count) * 4 + count; }

  size_t compress(const float* in, size_t count, std::byte* wire, State* state) const override {
    float* resid = feedback(count, state, method());
    auto* q = reinterpret_cast<int8_t*>(wire + chunks(count) * 4);
    const uint64_t noise = call_noise(params(), state);
    for_each_chunk(count, params().chunk, [&](size_t c, size_t first, size_t len) {
      // With feedback the chunk is corrected in place, and quantised while it is in cache.
      const float* src = resid ? resid + first : in + first;
      const float scale = resid ? kernels::add_max_abs(resid + first, in + first, len)
                                : kernels::max_abs(in + first, len);
      set_scale(wire, c, scale);
      kernels::quantize_int8(src, q + first, resid ? resid + first : nullptr, len, scale,
                             params().levels, kernels::mix64(noise + c));
    });
    if (state) state->calls += 1;
    return max_wire_bytes(count);
  }

  void decompress(const std::byte* wire, size_t bytes, float* out, size_t count,
                  bool accumulate) const override {
    check_wire(method(), bytes, max_wire_bytes(count), count);
    const auto* q = reinterpret_cast<const int8_t*>(wire + chunks(count) * 4);
    for_each_chunk(count, params().chunk, [&](size_t c, size_t first, size_t len) {
      kernels::dequantize_int8(q + first, out + first, len,
                               scale_at(wire, c) / static_cast<float>(params().levels), accumulate);
    });
  }
};

}  // namespace

std::unique_ptr<Compressor> make_int8(const Params& params) {
  return std::make_unique<Int8Compressor>(params);
}

}  // namespace plait::compress::detail
