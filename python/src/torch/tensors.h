// Tensors as plait sees them: element types, reduction operators, contiguous buffers and byte
// packing for the ProcessGroup adapter.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "plait/types.h"

namespace plait::torch_backend {

// The plait type that reduces this tensor's elements natively; nullopt when plait has none
// (bool, int16, complex, ...): those reduce through fallback_reduce.
std::optional<DataType> native_dtype(at::ScalarType type);
// nullopt for operators plait lacks (bitwise AND/OR/XOR); PREMUL_SUM is refused by the caller.
std::optional<ReduceOp> native_op(const c10d::ReduceOp& op);
std::string op_name(const c10d::ReduceOp& op);

// Names a call in error messages: "plait rank 2 all_reduce", "plait rank 2 all_gather
// output". Written out only when a check fails, so a call that passes builds no string.
struct CallName {
  int rank;
  const char* op;
  const char* part = "";  // which argument a check is about (" output")
  CallName of(const char* argument) const { return {rank, op, argument}; }
};
std::ostream& operator<<(std::ostream& os, const CallName& call);

// Every tensor the adapter touches must be a dense CPU tensor; `what` names the call.
void check_cpu_dense(const at::Tensor& t, const CallName& what);
void check_single(const std::vector<at::Tensor>& tensors, const CallName& what);
void check_same(const at::Tensor& a, const at::Tensor& b, const CallName& what);
// `lists` holds exactly one list of `size` dense CPU tensors, each of the type and size of
// `like` (allgather's outputs, gather's outputs and scatter's inputs at the root).
void check_rank_list(const std::vector<std::vector<at::Tensor>>& lists, int size,
                     const at::Tensor& like, const CallName& what);
// The operator suits the tensor: PREMUL_SUM is refused, bitwise operators need integers or
// bool, complex tensors only sum or average.
void check_reduce_op(const c10d::ReduceOp& op, const at::Tensor& t, const CallName& what);

inline size_t nbytes(const at::Tensor& t) {
  return static_cast<size_t>(t.numel()) * t.element_size();
}

// A contiguous buffer that plait may write: the tensor itself when it is contiguous, else a
// contiguous copy that land() copies back into the user's tensor. A value (two tensor
// handles), so a call that needs no staging allocates nothing for it.
struct Landing {
  at::Tensor user;
  at::Tensor buffer;
  explicit Landing(const at::Tensor& t) : user(t), buffer(t.is_contiguous() ? t : t.contiguous()) {}
  bool staged() const { return !buffer.is_same(user); }
  void land() const {
    if (staged()) user.copy_(buffer);
  }
};

// The bytes of several tensors back to back (for coalesced and list collectives).
at::Tensor pack_bytes(const std::vector<at::Tensor>& tensors);
// Copies nbytes(dst) bytes from `src` at `offset` into dst (any layout).
void unpack_bytes(const at::Tensor& src, size_t offset, at::Tensor& dst);
// The inverse of pack_bytes: consecutive blocks of `src` into each of `dsts`, in order.
void unpack_all(const at::Tensor& src, std::vector<at::Tensor>& dsts);

// Combines the `n` rows of `stacked` (shape [n, ...]) with `op` into `out`, for element types
// or operators plait cannot reduce itself.
void reduce_rows(const at::Tensor& stacked, const c10d::ReduceOp& op, at::Tensor& out);

}  // namespace plait::torch_backend
