// The factory, the names, and the steps the compressors share.
#include <cmath>
#include <cstring>

#include "compress/compressors.h"
#include "compress/kernels.h"

namespace plait::compress {
namespace {

constexpr std::string_view kNames[] = {"fp16", "bf16",      "int8",    "sign",
                                       "topk", "threshold", "randomk", "powersgd"};

void check_params(Method method, const Params& p) {
  const ErrorContext ctx{.op = detail::op_name(method, "create")};
  auto bad = [&](const std::string& what) { throw invalid_usage(what, ctx); };
  switch (method) {
    case Method::kInt8:
      if (p.levels < 1 || p.levels > 127) bad("levels " + std::to_string(p.levels) + " (1..127)");
      [[fallthrough]];
    case Method::kSign:
      if (p.chunk == 0) bad("chunk 0 (values sharing a scale: at least 1)");
      break;
    case Method::kTopK:
    case Method::kRandomK:
      if (p.k == 0 && !(p.ratio > 0.0 && p.ratio <= 1.0))
        bad("ratio " + std::to_string(p.ratio) + " (0 < ratio <= 1, or k)");
      break;
    case Method::kThreshold:
      if (!(p.threshold > 0.0f) || !std::isfinite(p.threshold))
        bad("threshold " + std::to_string(p.threshold) + " (a finite value > 0)");
      break;
    case Method::kPowerSgd:
      if (p.rank < 1) bad("rank " + std::to_string(p.rank) + " (at least 1)");
      break;
    default:
      break;
  }
}

}  // namespace

std::string_view to_string(Method method) {
  const auto i = static_cast<size_t>(method);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

Method parse_method(std::string_view name) {
  for (size_t i = 0; i < std::size(kNames); ++i)
    if (kNames[i] == name) return static_cast<Method>(i);
  std::string known;
  for (std::string_view n : kNames) known += (known.empty() ? "" : ", ") + std::string(n);
  throw invalid_usage("unknown compression method '" + std::string(name) + "' (" + known + ")",
                      {.op = "compress"});
}

std::unique_ptr<Compressor> Compressor::create(Method method, const Params& params) {
  check_params(method, params);
  switch (method) {
    case Method::kFp16:
    case Method::kBf16: return detail::make_cast(method, params);
    case Method::kInt8: return detail::make_int8(params);
    case Method::kSign: return detail::make_sign(params);
    case Method::kTopK: return detail::make_top_k(params);
    case Method::kThreshold: return detail::make_threshold(params);
    case Method::kRandomK: return detail::make_random_k(params);
    case Method::kPowerSgd: return detail::make_power_sgd(params);
  }
  throw invalid_usage("unknown compression method #" + std::to_string(static_cast<int>(method)),
                      {.op = "compress"});
}

namespace detail {

std::string op_name(Method method, const char* step) {
  return std::string(step) + " (" + std::string(to_string(method)) + ")";
}

float* feedback(size_t count, State* state, Method method) {
  if (!state) return nullptr;
  if (state->residual.empty()) {
    state->residual.assign(count, 0.0f);
  } else if (state->residual.size() != count) {
    throw invalid_usage("this state belongs to a tensor of " + std::to_string(state->residual.size()) +
                            " values, not " + std::to_string(count) + " (one State per tensor)",
                        {.op = op_name(method, "compress"), .bytes = static_cast<int64_t>(count * 4)});
  }
  return state->residual.data();
}

float* corrected(const float* in, size_t count, State* state, Method method) {
  float* resid = feedback(count, state, method);
  if (!resid) return const_cast<float*>(in);  // read only: the compressors write resid only with a state
  kernels::add(resid, in, count);
  return resid;
}

void check_wire(Method method, size_t bytes, size_t want, size_t count) {
  if (bytes != want)
    throw invalid_usage("a wire of " + std::to_string(bytes) + " bytes does not hold " +
                            std::to_string(count) + " values (" + std::to_string(want) + " bytes)",
                        {.op = op_name(method, "decompress"), .bytes = static_cast<int64_t>(bytes)});
}

uint64_t call_noise(const Params& params, const State* state) {
  return kernels::mix64(params.seed ^ kernels::mix64(state ? state->calls : 0));
}

size_t k_of(Method method, const Params& params, size_t count) {
  size_t k = params.k;
  if (k == 0) k = std::max<size_t>(1, static_cast<size_t>(std::llround(params.ratio * static_cast<double>(count))));
  if (k > count)
    throw invalid_usage("k = " + std::to_string(k) + " is larger than the tensor (" + std::to_string(count) +
                            " values)",
                        {.op = op_name(method, "compress")});
  return k;
}

void check_indexable(Method method, size_t count) {
  if (count > UINT32_MAX)
    throw invalid_usage("a tensor of " + std::to_string(count) + " values: sparse wires index at most 2^32",
                        {.op = op_name(method, "compress")});
}

void scatter_entries(Method method, const std::byte* wire, size_t bytes, float* out, size_t count,
                     bool accumulate) {
  if (bytes % sizeof(SparseEntry) != 0 || bytes / sizeof(SparseEntry) > count)
    throw invalid_usage("a sparse wire of " + std::to_string(bytes) + " bytes for " + std::to_string(count) +
                            " values (8 bytes an entry, at most one per value)",
                        {.op = op_name(method, "decompress"), .bytes = static_cast<int64_t>(bytes)});
  const size_t n = bytes / sizeof(SparseEntry);
  // Every index checked before `out` is touched: a bad wire leaves it as it was.
  for (size_t e = 0; e < n; ++e) {
    uint32_t index;
    std::memcpy(&index, wire + e * sizeof(SparseEntry), sizeof index);
    if (index >= count)
      throw invalid_usage("a sparse wire names value " + std::to_string(index) + " of " +
                              std::to_string(count),
                          {.op = op_name(method, "decompress")});
  }
  if (!accumulate) std::memset(out, 0, count * sizeof(float));
  for (size_t e = 0; e < n; ++e) {
    SparseEntry entry;
    std::memcpy(&entry, wire + e * sizeof entry, sizeof entry);
    out[entry.index] += entry.value;
  }
}

}  // namespace detail
}  // namespace plait::compress
