// PowerSGD's steps (Vogels et al.): the values seen as a matrix M (rows x cols, row-major,
// zero past the last value), a rank-r approximation P Q^T from one power iteration warm
// started from the last Q. Both factors are kept transposed (r rows of `rows` and of `cols`
// values), so every step is a dot product or an axpy over contiguous memory. Separate steps,
// because a compressed allreduce sums P and Q across ranks between them.
#pragma once

#include <cstddef>

#include "plait/compress.h"

namespace plait::compress::detail {

struct PowerSgdShape {
  size_t rows = 0, cols = 0, rank = 0;
  size_t p_values() const { return rank * rows; }
  size_t q_values() const { return rank * cols; }
};
PowerSgdShape power_sgd_shape(const Params& params, size_t count);

// Q^T's first values, uniform in [-1, 1) from `seed`: the same on every rank that shares it.
void power_sgd_initial_q(float* qt, const PowerSgdShape& shape, uint64_t seed);
// pt = (M Q)^T
void power_sgd_mq(const float* m, size_t count, const PowerSgdShape& shape, const float* qt, float* pt);
// m += x (error feedback), then pt = (M Q)^T: a row at a time, while it is in cache.
void power_sgd_add_mq(float* m, const float* x, size_t count, const PowerSgdShape& shape, const float* qt,
                      float* pt);
// The columns of P made orthonormal (Gram-Schmidt): the rows of pt.
void power_sgd_orthonormalize(float* pt, const PowerSgdShape& shape);
// qt = (M^T P)^T
void power_sgd_mtp(const float* m, size_t count, const PowerSgdShape& shape, const float* pt, float* qt);
// out (+)= P Q^T, or out -= P Q^T with `subtract` (the residual), over the first `count` values.
void power_sgd_reconstruct(const float* pt, const float* qt, const PowerSgdShape& shape, float* out,
                           size_t count, bool accumulate, bool subtract = false);
// out = P Q^T and residual -= out, a row at a time: the approximation and what it left out.
void power_sgd_reconstruct_residual(const float* pt, const float* qt, const PowerSgdShape& shape, float* out,
                                    float* residual, size_t count);

}  // namespace plait::compress::detail
