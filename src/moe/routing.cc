#include "moe/routing.h"

#include <cstring>
#include <string>

#include "core/reduce.h"
#include "plait/error.h"

namespace plait::moe {
namespace {

// Calls visit(dest) once for each rank that holds one of token t's experts.
template <typename Visit>
void for_each_dest(const Shape& shape, int rank, const int64_t* row, size_t t, Visit&& visit) {
  const int per_rank = shape.experts_per_rank();
  int last = -1;  // top-k lists are short: dedup against the earlier entries directly
  for (int j = 0; j < shape.topk; ++j) {
    const int64_t e = row[j];
    if (e < 0) continue;
    if (e >= shape.num_experts)
      throw invalid_usage("moe dispatch: token " + std::to_string(t) + " names expert " +
                              std::to_string(e) + " of " + std::to_string(shape.num_experts),
                          {.rank = rank, .op = "moe dispatch"});
    const int dest = static_cast<int>(e / per_rank);
    if (dest == last) continue;
    bool seen = false;
    for (int i = 0; i < j && !seen; ++i) seen = row[i] >= 0 && row[i] / per_rank == dest;
    if (!seen) visit(dest);
    last = dest;
  }
}

}  // namespace

void route(const Shape& shape, int rank, const int64_t* topk_idx, size_t num_tokens,
           std::vector<int32_t>* send_tokens, std::vector<size_t>* send_offsets) {
  std::vector<size_t>& off = *send_offsets;
  off.assign(static_cast<size_t>(shape.size) + 1, 0);
  for (size_t t = 0; t < num_tokens; ++t)
    for_each_dest(shape, rank, topk_idx + t * shape.topk, t, [&](int d) { ++off[d + 1]; });
  for (int d = 0; d < shape.size; ++d) off[d + 1] += off[d];
  send_tokens->resize(off.back());
  std::vector<size_t> at(off.begin(), off.end() - 1);
  for (size_t t = 0; t < num_tokens; ++t)
    for_each_dest(shape, rank, topk_idx + t * shape.topk, t,
                  [&](int d) { (*send_tokens)[at[d]++] = static_cast<int32_t>(t); });
}

Layout layout(const Shape& shape, int rank, const int64_t* topk_idx, size_t num_tokens) {
  Layout l;
  l.tokens_per_rank.assign(shape.size, 0);
  l.tokens_per_expert.assign(shape.num_experts, 0);
  l.token_in_rank.assign(num_tokens * shape.size, 0);
  for (size_t t = 0; t < num_tokens; ++t) {
    const int64_t* row = topk_idx + t * shape.topk;
    for_each_dest(shape, rank, row, t, [&](int d) {
      ++l.tokens_per_rank[d];
      l.token_in_rank[t * shape.size + d] = 1;
    });
    for (int j = 0; j < shape.topk; ++j)
      if (row[j] >= 0) ++l.tokens_per_expert[row[j]];
  }
  return l;
}

void gather_rows(const void* x, size_t row_bytes, const int32_t* tokens, size_t n, void* out) {
  const auto* src = static_cast<const std::byte*>(x);
  auto* dst = static_cast<std::byte*>(out);
  for (size_t i = 0; i < n; ++i)
    std::memcpy(dst + i * row_bytes, src + static_cast<size_t>(tokens[i]) * row_bytes, row_bytes);
}

void write_meta(const Shape& shape, int dest, const int64_t* topk_idx, const float* topk_weights,
                const int32_t* tokens, size_t n, void* out) {
  const int k = shape.topk;
  const int64_t first = static_cast<int64_t>(dest) * shape.experts_per_rank();
  const int64_t end = first + shape.experts_per_rank();
  auto* p = static_cast<std::byte*>(out);
  for (size_t i = 0; i < n; ++i, p += shape.meta_bytes()) {
    const size_t t = static_cast<size_t>(tokens[i]);
    auto* idx = reinterpret_cast<int32_t*>(p);
    auto* w = reinterpret_cast<float*>(p + k * 4);
    for (int j = 0; j < k; ++j) {
      const int64_t e = topk_idx[t * k + j];
      const bool here = e >= first && e < end;
      idx[j] = here ? static_cast<int32_t>(e - first) : -1;
      w[j] = here && topk_weights ? topk_weights[t * k + j] : 0.0f;
    }
  }
}

void read_meta(const Shape& shape, const void* meta, size_t n, int64_t* idx, float* weights,
               std::vector<int64_t>* tokens_per_expert) {
  const int k = shape.topk;
  const auto* p = static_cast<const std::byte*>(meta);
  for (size_t i = 0; i < n; ++i, p += shape.meta_bytes()) {
    int32_t local[64];
    float w[64];
    std::memcpy(local, p, k * 4);
    std::memcpy(w, p + k * 4, k * 4);
    for (int j = 0; j < k; ++j) {
      if (idx) idx[i * k + j] = local[j];
      if (weights) weights[i * k + j] = w[j];
      if (local[j] >= 0) ++(*tokens_per_expert)[local[j]];
    }
  }
}

void accumulate_rows(DataType dtype, size_t hidden, const void* rows, const int32_t* tokens,
                     size_t n, void* out, const float* row_weights, float* out_weights, int topk,
                     std::vector<uint8_t>& touched) {
  const size_t row_bytes = hidden * dtype_size(dtype);
  const CombineFn add = combine_kernel(dtype, ReduceOp::kSum, hidden <= kFewElements);
  const auto* src = static_cast<const std::byte*>(rows);
  auto* dst = static_cast<std::byte*>(out);
  const bool weights = row_weights && out_weights;
  for (size_t i = 0; i < n; ++i) {
    const auto t = static_cast<size_t>(tokens[i]);
    std::byte* o = dst + t * row_bytes;
    float* ow = weights ? out_weights + t * topk : nullptr;
    const float* rw = weights ? row_weights + i * topk : nullptr;
    if (!touched[t]) {
      touched[t] = 1;
      std::memcpy(o, src + i * row_bytes, row_bytes);
      if (weights) std::memcpy(ow, rw, static_cast<size_t>(topk) * sizeof(float));
      continue;
    }
    add(o, o, src + i * row_bytes, hidden);
    if (weights)
      for (int j = 0; j < topk; ++j) ow[j] += rw[j];
  }
}

void zero_untouched(size_t row_bytes, void* out, float* out_weights, int topk,
                    const std::vector<uint8_t>& touched) {
  auto* dst = static_cast<std::byte*>(out);
  for (size_t t = 0; t < touched.size(); ++t) {
    if (touched[t]) continue;
    std::memset(dst + t * row_bytes, 0, row_bytes);
    if (out_weights) std::memset(out_weights + t * topk, 0, static_cast<size_t>(topk) * sizeof(float));
  }
}

}  // namespace plait::moe
