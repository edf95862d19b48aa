// Gradient compressors with error feedback.
//
//   auto c = plait::compress::Compressor::create(plait::compress::Method::kTopK, {.ratio = 0.01});
//   plait::compress::State state;                     // one per tensor, kept across steps
//   std::vector<std::byte> wire(c->max_wire_bytes(n));
//   size_t bytes = c->compress(grad, n, wire.data(), &state);
//   c->decompress(wire.data(), bytes, out, n);
//
// With a State, compress() adds the residual left by the previous call before compressing and
// keeps what this wire does not carry (error feedback): over many steps nothing of the
// gradient is lost, only delayed. Values are f32; every method's wire has a fixed layout (see
// docs/compression.md) and, except kThreshold's, a size that depends on the count alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace plait::compress {

enum class Method : uint8_t {
  kFp16,       // IEEE half, round to nearest even: 2 bytes per value
  kBf16,       // bfloat16, round to nearest even: 2 bytes per value
  kInt8,       // QSGD: per chunk a scale (max |x|), values stochastically rounded to s levels
  kSign,       // EF-signSGD: per chunk a scale (mean |x|), one sign bit per value
  kTopK,       // the k largest magnitudes, as (index, value) pairs
  kThreshold,  // every value with |x| >= threshold, as (index, value) pairs
  kRandomK,    // k values at indices drawn from a seed sent on the wire (one per stratum)
  kPowerSgd,   // rank-r factors P (rows x r) and Q (cols x r) of the values as a matrix
};
inline constexpr Method kAllMethods[] = {Method::kFp16, Method::kBf16,      Method::kInt8,
                                         Method::kSign, Method::kTopK,      Method::kThreshold,
                                         Method::kRandomK, Method::kPowerSgd};

// "fp16", "bf16", "int8", "sign", "topk", "threshold", "randomk", "powersgd".
std::string_view to_string(Method method);
// Throws plait::Error (invalid usage) for an unknown name, listing the known ones.
Method parse_method(std::string_view name);

struct Params {
  int levels = 127;          // int8: levels per sign, 1..127
  size_t chunk = 1024;       // int8, sign: values sharing one scale
  double ratio = 0.01;       // topk, randomk: k = max(1, ratio * count), 0 < ratio <= 1
  size_t k = 0;              // topk, randomk: k itself (0: from ratio); more than count is an error
  float threshold = 0.0f;    // threshold: values with |x| >= threshold go, > 0
  int rank = 4;              // powersgd: r >= 1 (at most min(rows, cols) is used)
  size_t rows = 0;           // powersgd: the matrix's rows (0: about sqrt(count)); cols follow
  uint64_t seed = 0x706c616974ull;  // stochastic rounding, randomk's draws, powersgd's first Q
};

// What a compressor keeps per tensor between calls. Empty at first; sized by the first call;
// a later call with another count is an error.
struct State {
  std::vector<float> residual;  // error feedback: what earlier wires did not carry
  std::vector<float> q;         // powersgd: the last Q (warm start)
  uint64_t calls = 0;           // fresh randomness per call
};

class Compressor {
 public:
  // Throws plait::Error (invalid usage) for parameters out of range, naming them.
  static std::unique_ptr<Compressor> create(Method method, const Params& params = {});
  virtual ~Compressor() = default;

  Method method() const { return method_; }
  const Params& params() const { return params_; }

  // The wire's size for `count` values: exact for every method but kThreshold (its bound).
  virtual size_t max_wire_bytes(size_t count) const = 0;
  // Compresses `count` values into `wire` (max_wire_bytes(count) bytes of room); returns the
  // bytes written. With `state`, error feedback as above; `in` is never written.
  virtual size_t compress(const float* in, size_t count, std::byte* wire, State* state) const = 0;
  // The values a wire of `bytes` carries, written into out[0..count) (or added to them, with
  // `accumulate`: a sum of several ranks' sparse wires). A wire whose size does not fit
  // `count` is an invalid-usage error.
  virtual void decompress(const std::byte* wire, size_t bytes, float* out, size_t count,
                          bool accumulate = false) const = 0;

 protected:
  Compressor(Method method, const Params& params) : method_(method), params_(params) {}

 private:
  Method method_;
  Params params_;
};

}  // namespace plait::compress
