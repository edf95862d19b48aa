// PowerSGD as a compressor: one power iteration per call on the error-corrected values, warm
// started from the state's Q. Wire: P^T (rank x rows f32), then Q^T (rank x cols f32).
#include "compress/power_sgd.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "compress/compressors.h"
#include "compress/kernels.h"

namespace plait::compress::detail {

PowerSgdShape power_sgd_shape(const Params& params, size_t count) {
  PowerSgdShape s;
  if (count == 0) return s;
  s.rows = params.rows ? std::min(params.rows, count)
                       : std::max<size_t>(1, static_cast<size_t>(std::sqrt(static_cast<double>(count))));
  s.cols = (count + s.rows - 1) / s.rows;
  s.rank = std::min({static_cast<size_t>(params.rank), s.rows, s.cols});
  return s;
}

void power_sgd_initial_q(float* qt, const PowerSgdShape& shape, uint64_t seed) {
  for (size_t i = 0; i < shape.q_values(); ++i)
    qt[i] = static_cast<float>(kernels::mix64(seed + i) >> 40) * 0x1p-23f - 1.0f;
}

namespace {

// Row i of M: its first value and length (the last row may be short).
inline size_t row_length(size_t i, size_t count, const PowerSgdShape& s) {
  return std::min(s.cols, count - i * s.cols);
}

}  // namespace

void power_sgd_mq(const float* m, size_t count, const PowerSgdShape& s, const float* qt, float* pt) {
  for (size_t i = 0; i < s.rows; ++i) {
    const size_t len = row_length(i, count, s);
    for (size_t c = 0; c < s.rank; ++c) pt[c * s.rows + i] = kernels::dot(m + i * s.cols, qt + c * s.cols, len);
  }
}

void power_sgd_add_mq(float* m, const float* x, size_t count, const PowerSgdShape& s, const float* qt, float* pt) {
  for (size_t i = 0; i < s.rows; ++i) {
    const size_t len = row_length(i, count, s);
    float* row = m + i * s.cols;
    kernels::add(row, x + i * s.cols, len);
    for (size_t c = 0; c < s.rank; ++c) pt[c * s.rows + i] = kernels::dot(row, qt + c * s.cols, len);
  }
}

void power_sgd_orthonormalize(float* pt, const PowerSgdShape& s) {
  constexpr float kEps = 1e-8f;  // a zero column stays (near) zero instead of dividing by 0
  for (size_t c = 0; c < s.rank; ++c) {
    float* col = pt + c * s.rows;
    for (size_t d = 0; d < c; ++d) {
      const float* prev = pt + d * s.rows;
      kernels::axpy(col, -kernels::dot(col, prev, s.rows), prev, s.rows);
    }
    kernels::scale(col, 1.0f / (std::sqrt(kernels::dot(col, col, s.rows)) + kEps), s.rows);
  }
}

void power_sgd_mtp(const float* m, size_t count, const PowerSgdShape& s, const float* pt, float* qt) {
  std::fill(qt, qt + s.q_values(), 0.0f);
  for (size_t i = 0; i < s.rows; ++i) {
    const size_t len = row_length(i, count, s);
    for (size_t c = 0; c < s.rank; ++c) kernels::axpy(qt + c * s.cols, pt[c * s.rows + i], m + i * s.cols, len);
  }
}

void power_sgd_reconstruct(const float* pt, const float* qt, const PowerSgdShape& s, float* out,
                           size_t count, bool accumulate, bool subtract) {
  for (size_t i = 0; i < s.rows; ++i) {
    const size_t len = row_length(i, count, s);
    float* row = out + i * s.cols;
    if (!accumulate && !subtract) std::fill(row, row + len, 0.0f);
    for (size_t c = 0; c < s.rank; ++c) {
      const float p = pt[c * s.rows + i];
      kernels::axpy(row, subtract ? -p : p, qt + c * s.cols, len);
    }
  }
}

void power_sgd_reconstruct_residual(const float* pt, const float* qt, const PowerSgdShape& s, float* out,
                                    float* residual, size_t count) {
  for (size_t i = 0; i < s.rows; ++i) {
    const size_t len = row_length(i, count, s);
    float* row = out + i * s.cols;
    std::fill(row, row + len, 0.0f);
    for (size_t c = 0; c < s.rank; ++c) kernels::axpy(row, pt[c * s.rows + i], qt + c * s.cols, len);
    kernels::axpy(residual + i * s.cols, -1.0f, row, len);
  }
}

namespace {

class PowerSgdCompressor final : public Compressor {
 public:
  explicit PowerSgdCompressor(const Params& params) : Compressor(Method::kPowerSgd, params) {}

  size_t max_wire_bytes(size_t count) const override {
    const PowerSgdShape s = power_sgd_shape(params(), count);
    return 4 * (s.p_values() + s.q_values());
  }

  size_t compress(const float* in, size_t count, std::byte* wire, State* state) const override {
    if (count == 0) return 0;
    const PowerSgdShape s = power_sgd_shape(params(), count);
    float* resid = feedback(count, state, method());
    const float* m = resid ? resid : in;
    auto* pt = reinterpret_cast<float*>(wire);
    auto* qt = pt + s.p_values();
    // The last call's Q (warm start), or a fresh one.
    std::vector<float> start(s.q_values());
    if (state && state->q.size() == s.q_values())
      start = state->q;
    else
      power_sgd_initial_q(start.data(), s, call_noise(params(), state));
    if (resid)
      power_sgd_add_mq(resid, in, count, s, start.data(), pt);  // error feedback in the same pass
    else
      power_sgd_mq(in, count, s, start.data(), pt);
    power_sgd_orthonormalize(pt, s);
    power_sgd_mtp(m, count, s, pt, qt);
    if (state) {
      state->q.assign(qt, qt + s.q_values());
      power_sgd_reconstruct(pt, qt, s, state->residual.data(), count, false, true);
      state->calls += 1;
    }
    return 4 * (s.p_values() + s.q_values());
  }

  void decompress(const std::byte* wire, size_t bytes, float* out, size_t count,
                  bool accumulate) const override {
    check_wire(method(), bytes, max_wire_bytes(count), count);
    if (count == 0) return;
    const PowerSgdShape s = power_sgd_shape(params(), count);
    const auto* pt = reinterpret_cast<const float*>(wire);
    power_sgd_reconstruct(pt, pt + s.p_values(), s, out, count, accumulate);
  }
};

}  // namespace

std::unique_ptr<Compressor> make_power_sgd(const Params& params) {
  return std::make_unique<PowerSgdCompressor>(params);
}

}  // namespace plait::compress::detail
