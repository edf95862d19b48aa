// Where a dispatch's tokens go and how they travel: the routing a Handle keeps, and the wire
// layout of a block (one source's rows for one destination).
//
// A dispatch block is [rows][one meta record per row]; a record holds the row's top-k as the
// destination's local expert numbers (int32, -1 for experts elsewhere) and then their weights
// (f32). A combine block is [rows], then [topk f32 weights per row] when weights travel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "plait/moe.h"

namespace plait::moe {

// The shape every rank of a dispatcher shares.
struct Shape {
  int size = 1;
  int num_experts = 0;
  int topk = 0;
  size_t row_bytes = 0;   // hidden * dtype size
  int experts_per_rank() const { return num_experts / size; }
  size_t meta_bytes() const { return static_cast<size_t>(topk) * 8; }  // int32 idx + f32 weight
  size_t weight_bytes() const { return static_cast<size_t>(topk) * 4; }
};

// Fills what a Handle keeps on the sending side (send_tokens, send_offsets) from topk_idx;
// throws kInvalidUsage naming the token for an expert out of range.
void route(const Shape& shape, int rank, const int64_t* topk_idx, size_t num_tokens,
           std::vector<int32_t>* send_tokens, std::vector<size_t>* send_offsets);

Layout layout(const Shape& shape, int rank, const int64_t* topk_idx, size_t num_tokens);

// Copies the rows of `tokens` (indices into x) back to back into `out`.
void gather_rows(const void* x, size_t row_bytes, const int32_t* tokens, size_t n, void* out);

// The meta records of `tokens` for destination `dest` into `out` (n * meta_bytes).
void write_meta(const Shape& shape, int dest, const int64_t* topk_idx, const float* topk_weights,
                const int32_t* tokens, size_t n, void* out);

// n meta records into the caller's idx (int64) and weights; counts rows per local expert.
// Either output may be null.
void read_meta(const Shape& shape, const void* meta, size_t n, int64_t* idx, float* weights,
               std::vector<int64_t>* tokens_per_expert);

// out[tokens[i]] += rows[i] for i < n (dtype), and weights likewise when both are given. A
// token's first row is copied rather than added to zeros (touched[t] says which came), so
// `out` needs no clearing first: zero_untouched() clears the rows that got none.
void accumulate_rows(DataType dtype, size_t hidden, const void* rows, const int32_t* tokens,
                     size_t n, void* out, const float* row_weights, float* out_weights, int topk,
                     std::vector<uint8_t>& touched);
void zero_untouched(size_t row_bytes, void* out, float* out_weights, int topk,
                    const std::vector<uint8_t>& touched);

// Fills a Handle's fields (private to users).
struct HandleBuilder {
  static size_t& num_tokens(Handle& h) { return h.num_tokens_; }
  static std::vector<int32_t>& send_tokens(Handle& h) { return h.send_tokens_; }
  static std::vector<size_t>& send_offsets(Handle& h) { return h.send_offsets_; }
  static std::vector<size_t>& recv_offsets(Handle& h) { return h.recv_offsets_; }
};

}  // namespace plait::moe
