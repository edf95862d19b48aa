// 1-bit sign, EF-signSGD-style: the values in chunks of `chunk`, each sent as its mean |x|
// and one sign bit a value; error feedback carries what the signs lose. Wire: the chunks' f32
// scales, then each chunk's bits from a byte boundary (ceil(len / 8) bytes a chunk).
#include "compress/compressors.h"
#include "compress/kernels.h"

namespace plait::compress::detail {
namespace {

class SignCompressor final : public Compressor {
 public:
  explicit SignCompressor(const Params& params) : Compressor(Method::kSign, params) {}

  size_t chunks(size_t count) const { return (count + params().chunk - 1) / params().chunk; }
  size_t bit_bytes(size_t count) const {
    const size_t chunk = params().chunk, whole = count / chunk, last = count % chunk;
    return whole * ((chunk + 7) / 8) + (last + 7) / 8;
  }
  size_t max_wire_bytes(size_t count) const override { return chunks(count) * 4 + bit_bytes(count); }

  size_t compress(const float* in, size_t count, std::byte* wire, State* state) const override {
    float* resid = feedback(count, state, method());
    const size_t row = (params().chunk + 7) / 8;  // a chunk's bytes of bits
    auto* bits = reinterpret_cast<uint8_t*>(wire + chunks(count) * 4);
    for_each_chunk(count, params().chunk, [&](size_t c, size_t first, size_t len) {
      const float* src = resid ? resid + first : in + first;
      const float sum = resid ? kernels::add_sum_abs(resid + first, in + first, len)
                              : kernels::sum_abs(in + first, len);
      const float scale = sum / static_cast<float>(len);
      set_scale(wire, c, scale);
      kernels::encode_sign(src, bits + c * row, resid ? resid + first : nullptr, len, scale);
    });
    if (state) state->calls += 1;
    return max_wire_bytes(count);
  }

  void decompress(const std::byte* wire, size_t bytes, float* out, size_t count,
                  bool accumulate) const override {
    check_wire(method(), bytes, max_wire_bytes(count), count);
    const size_t row = (params().chunk + 7) / 8;
    const auto* bits = reinterpret_cast<const uint8_t*>(wire + chunks(count) * 4);
    for_each_chunk(count, params().chunk, [&](size_t c, size_t first, size_t len) {
      kernels::decode_sign(bits + c * row, out + first, len, scale_at(wire, c), accumulate);
    });
  }
};

}  // namespace

std::unique_ptr<Compressor> make_sign(const Params& params) {
  return std::make_unique<SignCompressor>(params);
}

}  // namespace plait::compress::detail
