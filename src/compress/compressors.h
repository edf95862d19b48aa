// What the compressors share: their factories (one file each) and the checks and steps every
// method takes the same way.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "plait/compress.h"
#include "plait/error.h"

namespace plait::compress::detail {

std::unique_ptr<Compressor> make_cast(Method method, const Params& params);  // fp16, bf16
std::unique_ptr<Compressor> make_int8(const Params& params);
std::unique_ptr<Compressor> make_sign(const Params& params);
std::unique_ptr<Compressor> make_top_k(const Params& params);
std::unique_ptr<Compressor> make_threshold(const Params& params);
std::unique_ptr<Compressor> make_random_k(const Params& params);
std::unique_ptr<Compressor> make_power_sgd(const Params& params);

// "compress (topk)", for error contexts.
std::string op_name(Method method, const char* step);

// The state's residual for `count` values (zeros at the first call; a state of another
// tensor is an error), or null without a state. The streaming compressors add the input into
// it in the same pass as they compress.
float* feedback(size_t count, State* state, Method method);
// The values to compress, for the compressors that look at all of them before they write:
// with a state, its residual plus `in`, in place (the compressor then leaves there what the
// wire does not carry); without, `in`.
float* corrected(const float* in, size_t count, State* state, Method method);
// The residual to update (null without a state).
inline float* residual_of(State* state) { return state ? state->residual.data() : nullptr; }
// Throws unless a wire of `bytes` is what `want` says for `count` values.
void check_wire(Method method, size_t bytes, size_t want, size_t count);
// Fresh per call with a state, the same for every stateless call: stochastic rounding's and
// random-k's randomness.
uint64_t call_noise(const Params& params, const State* state);
// k for `count` values (topk, randomk), checked.
size_t k_of(Method method, const Params& params, size_t count);
// Index-carrying wires address values with 32 bits.
void check_indexable(Method method, size_t count);

// The chunked layouts (int8, sign): every `chunk` values share an f32 scale, and the wire
// holds the chunks' scales first. f(c, first, len) for every chunk c.
template <typename F>
void for_each_chunk(size_t count, size_t chunk, F&& f) {
  for (size_t c = 0, first = 0; first < count; ++c, first += chunk) f(c, first, std::min(chunk, count - first));
}
inline float scale_at(const std::byte* wire, size_t c) {
  float s;
  std::memcpy(&s, wire + 4 * c, 4);
  return s;
}
inline void set_scale(std::byte* wire, size_t c, float s) { std::memcpy(wire + 4 * c, &s, 4); }

// A sparse wire's entry: the value's index and the value.
struct SparseEntry {
  uint32_t index;
  float value;
};
static_assert(sizeof(SparseEntry) == 8);
// Appends (index, value) as entry *n of a sparse wire; with feedback the value is sent, so
// its residual is 0.
inline void put_entry(std::byte* wire, size_t* n, uint32_t index, float value, float* resid) {
  const SparseEntry e{index, value};
  std::memcpy(wire + *n * sizeof e, &e, sizeof e);
  *n += 1;
  if (resid) resid[index] = 0.0f;
}
// Writes or adds the entries of a sparse wire into out[0..count).
void scatter_entries(Method method, const std::byte* wire, size_t bytes, float* out, size_t count,
                     bool accumulate);

}  // namespace plait::compress::detail
