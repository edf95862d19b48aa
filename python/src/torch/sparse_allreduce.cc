// all_reduce of a sparse COO tensor (SUM, like gloo): every rank's coordinates and values are
// gathered and summed by coalescing. The second exchange's sizes come from the first, so the
// call runs to completion before it returns its (finished) Work.
#include <c10/util/Exception.h>

#include <numeric>

#include "process_group.h"
#include "tensors.h"

namespace plait::torch_backend {

c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::sparse_allreduce(
    at::Tensor& tensor, const c10d::AllreduceOptions& opts) {
  const CallName op = what("all_reduce (sparse)");
  TORCH_CHECK(tensor.device().is_cpu(), op, ": plait takes CPU tensors");
  TORCH_CHECK(opts.reduceOp.op_ == c10d::ReduceOp::SUM, op, ": sparse tensors reduce with SUM only, got ",
              op_name(opts.reduceOp));
  const CallOptions call = options(opts.timeout);
  at::Tensor mine = tensor.coalesce();
  // Rows: one per non-zero, [coordinates] and [value block].
  at::Tensor coords = mine.indices().t().contiguous();  // [nnz, sparse_dim], int64
  at::Tensor values = mine.values().contiguous();       // [nnz, dense dims...]
  int64_t nnz = mine._nnz();
  std::vector<int64_t> counts(size_);
  comm()->allgather(&nnz, counts.data(), 1, DataType::kI64, call)->wait();
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});

  const size_t coord_row = static_cast<size_t>(mine.sparse_dim()) * sizeof(int64_t);
  std::vector<int64_t> value_shape = values.sizes().vec();
  value_shape[0] = total;
  at::Tensor all_values = at::empty(value_shape, values.options());
  const size_t value_row = values.size(0) > 0 ? nbytes(values) / values.size(0)
                                              : (total > 0 ? nbytes(all_values) / total : 0);
  at::Tensor all_coords = at::empty({total, mine.sparse_dim()}, at::kLong);
  std::vector<size_t> coord_bytes, value_bytes;
  for (int64_t c : counts) {
    coord_bytes.push_back(static_cast<size_t>(c) * coord_row);
    value_bytes.push_back(static_cast<size_t>(c) * value_row);
  }
  auto a = comm()->allgatherv(coords.data_ptr(), all_coords.data_ptr(), coord_bytes, DataType::kU8, call);
  auto b = comm()->allgatherv(values.data_ptr(), all_values.data_ptr(), value_bytes, DataType::kU8, call);
  a->wait();
  b->wait();
  at::Tensor sum = at::sparse_coo_tensor(all_coords.t(), all_values, tensor.sizes()).coalesce();
  tensor.copy_(sum);

  auto work = make_work(c10d::OpType::ALLREDUCE, "plait:all_reduce", {tensor}, {tensor});
  PlaitWork::launch(work);
  return work;
}

}  // namespace plait::torch_backend
