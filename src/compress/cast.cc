// fp16 and bf16: every value cast to 16 bits, round to nearest even (2 bytes a value). The
// casts are allreduce-compatible: sums of casts are sums of values, rounded once more.
#include "compress/compressors.h"
#include "compress/kernels.h"

namespace plait::compress::detail {
namespace {

class CastCompressor final : public Compressor {
 public:
  CastCompressor(Method method, const Params& params) : Compressor(method, params) {}

  size_t max_wire_bytes(size_t count) const override { return count * 2; }

  size_t compress(const float* in, size_t count, std::byte* wire, State* state) const override {
    float* resid = feedback(count, state, method());
    auto* w = reinterpret_cast<uint16_t*>(wire);
    if (method() == Method::kFp16)
      kernels::encode_f16(in, resid, w, count);
    else
      kernels::encode_bf16(in, resid, w, count);
    if (state) state->calls += 1;
    return count * 2;
  }

  void decompress(const std::byte* wire, size_t bytes, float* out, size_t count,
                  bool accumulate) const override {
    check_wire(method(), bytes, count * 2, count);
    const auto* w = reinterpret_cast<const uint16_t*>(wire);
    if (method() == Method::kFp16)
      kernels::decode_f16(w, out, count, accumulate);
    else
      kernels::decode_bf16(w, out, count, accumulate);
  }
};

}  // namespace

std::unique_ptr<Compressor> make_cast(Method method, const Params& params) {
  return std::make_unique<CastCompressor>(method, params);
}

}  // namespace plait::compress::detail
