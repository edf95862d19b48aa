#include "tensors.h"

#include <cstring>

#include <c10/util/Exception.h>

namespace plait::torch_backend {

std::optional<DataType> native_dtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return DataType::kF32;
    case at::kDouble: return DataType::kF64;
    case at::kHalf: return DataType::kF16;
    case at::kBFloat16: return DataType::kBF16;
    case at::kChar: return DataType::kI8;
    case at::kByte: return DataType::kU8;
    case at::kInt: return DataType::kI32;
    case at::kLong: return DataType::kI64;
    default: return std::nullopt;
  }
}

std::optional<ReduceOp> native_op(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return ReduceOp::kSum;
    case c10d::ReduceOp::PRODUCT: return ReduceOp::kProd;
    case c10d::ReduceOp::MIN: return ReduceOp::kMin;
    case c10d::ReduceOp::MAX: return ReduceOp::kMax;
    case c10d::ReduceOp::AVG: return ReduceOp::kAvg;
    default: return std::nullopt;
  }
}

std::string op_name(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

std::ostream& operator<<(std::ostream& os, const CallName& call) {
  return os << "plait rank " << call.rank << " " << call.op << call.part;
}

void check_cpu_dense(const at::Tensor& t, const CallName& what) {
  TORCH_CHECK(t.defined(), what, ": tensor is undefined");
  TORCH_CHECK(t.device().is_cpu(), what, ": plait takes CPU tensors, got one on ", t.device());
  TORCH_CHECK(t.layout() == at::kStrided, what, ": plait takes dense tensors, got layout ",
              t.layout());
}

void check_single(const std::vector<at::Tensor>& tensors, const CallName& what) {
  TORCH_CHECK(tensors.size() == 1, what, ": expects exactly one tensor per rank, got ",
              tensors.size());
  check_cpu_dense(tensors[0], what);
}

void check_same(const at::Tensor& a, const at::Tensor& b, const CallName& what) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), what, ": tensors differ in type (",
              a.scalar_type(), " and ", b.scalar_type(), ")");
  TORCH_CHECK(a.numel() == b.numel(), what, ": tensors differ in size (", a.numel(), " and ",
              b.numel(), " elements)");
}

void check_rank_list(const std::vector<std::vector<at::Tensor>>& lists, int size,
                     const at::Tensor& like, const CallName& what) {
  TORCH_CHECK(lists.size() == 1 && static_cast<int>(lists[0].size()) == size, what,
              ": expects one list of ", size, " tensors");
  for (const auto& t : lists[0]) {
    check_cpu_dense(t, what);
    check_same(t, like, what);
  }
}

void check_reduce_op(const c10d::ReduceOp& op, const at::Tensor& t, const CallName& what) {
  TORCH_CHECK(op.op_ != c10d::ReduceOp::PREMUL_SUM && op.op_ != c10d::ReduceOp::UNUSED, what,
              ": reduce op ", op_name(op), " is not supported by plait");
  const bool bitwise = op.op_ == c10d::ReduceOp::BAND || op.op_ == c10d::ReduceOp::BOR ||
                       op.op_ == c10d::ReduceOp::BXOR;
  TORCH_CHECK(!bitwise || at::isIntegralType(t.scalar_type(), /*includeBool=*/true), what,
              ": ", op_name(op), " needs an integer or bool tensor, got ", t.scalar_type());
  TORCH_CHECK(!t.is_complex() || op.op_ == c10d::ReduceOp::SUM || op.op_ == c10d::ReduceOp::AVG,
              what, ": ", op_name(op), " is not defined for complex tensors");
}

at::Tensor pack_bytes(const std::vector<at::Tensor>& tensors) {
  size_t total = 0;
  for (const auto& t : tensors) total += nbytes(t);
  at::Tensor flat = at::empty({static_cast<int64_t>(total)}, at::kByte);
  auto* p = static_cast<char*>(flat.data_ptr());
  for (const auto& t : tensors) {
    at::Tensor c = t.contiguous();
    if (nbytes(c) > 0) std::memcpy(p, c.data_ptr(), nbytes(c));
    p += nbytes(c);
  }
  return flat;
}

void unpack_bytes(const at::Tensor& src, size_t offset, at::Tensor& dst) {
  TORCH_CHECK(offset + nbytes(dst) <= nbytes(src), "unpack past the end of a staging buffer");
  const char* p = static_cast<const char*>(src.data_ptr()) + offset;
  if (nbytes(dst) == 0) return;
  if (dst.is_contiguous()) {
    std::memcpy(dst.data_ptr(), p, nbytes(dst));
  } else {
    dst.copy_(at::from_blob(const_cast<char*>(p), dst.sizes(), dst.options()));
  }
}

void unpack_all(const at::Tensor& src, std::vector<at::Tensor>& dsts) {
  size_t offset = 0;
  for (auto& t : dsts) {
    unpack_bytes(src, offset, t);
    offset += nbytes(t);
  }
}

void reduce_rows(const at::Tensor& stacked, const c10d::ReduceOp& op, at::Tensor& out) {
  const int64_t n = stacked.size(0);
  at::Tensor acc = stacked[0].clone();
  const bool is_bool = acc.scalar_type() == at::kBool;
  for (int64_t i = 1; i < n; ++i) {
    const at::Tensor row = stacked[i];
    switch (op.op_) {
      case c10d::ReduceOp::SUM:
      case c10d::ReduceOp::AVG:
        if (is_bool) acc.logical_or_(row); else acc.add_(row);
        break;
      case c10d::ReduceOp::PRODUCT:
        if (is_bool) acc.logical_and_(row); else acc.mul_(row);
        break;
      case c10d::ReduceOp::MIN: acc = at::minimum(acc, row); break;
      case c10d::ReduceOp::MAX: acc = at::maximum(acc, row); break;
      case c10d::ReduceOp::BAND: acc.bitwise_and_(row); break;
      case c10d::ReduceOp::BOR: acc.bitwise_or_(row); break;
      case c10d::ReduceOp::BXOR: acc.bitwise_xor_(row); break;
      default: TORCH_CHECK(false, "plait cannot reduce with ", op_name(op));
    }
  }
  if (op.op_ == c10d::ReduceOp::AVG && !is_bool) {
    if (at::isIntegralType(acc.scalar_type(), /*includeBool=*/false))
      acc = at::div(acc, n, "floor");
    else
      acc.div_(n);
  }
  out.copy_(acc.view(out.sizes()));
}

}  // namespace plait::torch_backend
