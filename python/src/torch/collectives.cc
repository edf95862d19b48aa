// The collectives of the plait process group. Each one checks its tensors, stages buffers
// plait cannot use in place (non-contiguous tensors, tensor lists), starts plait operations
// and leaves the copy-out steps to the Work. Data that is only moved travels as bytes, so
// every element type works; reductions use plait's own kernels where it has the type and
// operator, and an allgather plus a local reduce where it does not (bool, int16, bitwise).
#include <c10/util/Exception.h>

#include "process_group.h"
#include "tensors.h"

namespace plait::torch_backend {
namespace {

void check_root(int64_t root, int size, const CallName& what) {
  TORCH_CHECK(root >= 0 && root < size, what, ": root ", root, " out of range for ", size,
              " ranks");
}

// Complex tensors reduce as pairs of reals (sum and average are elementwise on them).
at::Tensor as_real(const at::Tensor& t) { return t.is_complex() ? at::view_as_real(t) : t; }

}  // namespace

void PlaitProcessGroup::fallback_allreduce(PlaitWork& work, const at::Tensor& buffer,
                                           const c10d::ReduceOp& op, const CallOptions& call) {
  at::Tensor rows = at::empty({size_, buffer.numel()}, buffer.options());
  work.keep(rows);
  work.add_part(comm()->allgather(buffer.data_ptr(), rows.data_ptr(), nbytes(buffer),
                                 DataType::kU8, call));
  at::Tensor out = buffer;
  work.then([rows, out, op]() mutable { reduce_rows(rows, op, out); });
}

at::Tensor PlaitProcessGroup::allgather_packed(PlaitWork& work,
                                               const std::vector<at::Tensor>& inputs,
                                               const CallOptions& call) {
  at::Tensor in = pack_bytes(inputs);
  at::Tensor flat = at::empty({static_cast<int64_t>(size_ * nbytes(in))}, at::kByte);
  work.keep(in);
  work.keep(flat);
  work.add_part(comm()->allgather(in.data_ptr(), flat.data_ptr(), nbytes(in), DataType::kU8, call));
  return flat;
}

c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  const CallName op = what("all_reduce");
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].is_sparse())
    return sparse_allreduce(tensors[0], opts);
  check_single(tensors, op);
  check_reduce_op(opts.reduceOp, tensors[0], op);
  auto work = make_work(c10d::OpType::ALLREDUCE, "plait:all_reduce", tensors, tensors);
  const Landing landing(tensors[0]);
  at::Tensor buffer = as_real(landing.buffer);
  work->keep(buffer);
  const CallOptions call = options(opts.timeout);
  auto dtype = native_dtype(buffer.scalar_type());
  auto redop = native_op(opts.reduceOp);
  if (dtype && redop)
    work->add_part(comm()->allreduce(buffer.data_ptr(), buffer.data_ptr(), buffer.numel(), *dtype,
                                    *redop, call));
  else
    fallback_allreduce(*work, buffer, opts.reduceOp, call);
  if (landing.staged()) work->then([landing] { landing.land(); });
  PlaitWork::launch(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const CallName op = what("all_reduce_coalesced");
  TORCH_CHECK(!tensors.empty(), op, ": no tensors");
  for (const auto& t : tensors) {
    check_cpu_dense(t, op);
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(), op,
                ": tensors must share one type, got ", tensors[0].scalar_type(), " and ",
                t.scalar_type());
    check_reduce_op(opts.reduceOp, t, op);
  }
  // Titled by the base operation, as gloo does: profiles and PyTorch's tests look for it.
  auto work = make_work(c10d::OpType::ALLREDUCE_COALESCED, "plait:all_reduce", tensors, tensors);
  // One flat buffer, one plait call.
  std::vector<at::Tensor> flat_parts;
  for (const auto& t : tensors) flat_parts.push_back(as_real(t).reshape({-1}));
  at::Tensor flat = at::cat(flat_parts);
  work->keep(flat);
  const CallOptions call = options(opts.timeout);
  auto dtype = native_dtype(flat.scalar_type());
  auto redop = native_op(opts.reduceOp);
  if (dtype && redop)
    work->add_part(comm()->allreduce(flat.data_ptr(), flat.data_ptr(), flat.numel(), *dtype,
                                    *redop, call));
  else
    fallback_allreduce(*work, flat, opts.reduceOp, call);
  std::vector<at::Tensor> outs = tensors;
  work->then([flat, outs]() mutable { unpack_all(flat, outs); });
  PlaitWork::launch(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
  const CallName op = what("reduce");
  check_single(tensors, op);
  check_reduce_op(opts.reduceOp, tensors[0], op);
  check_root(opts.rootRank, size_, op);
  TORCH_CHECK(opts.rootTensor == 0, op, ": rootTensor must be 0, got ", opts.rootTensor);
  const int root = static_cast<int>(opts.rootRank);
  auto work = make_work(c10d::OpType::REDUCE, "plait:reduce", tensors, tensors);
  const Landing landing(tensors[0]);
  at::Tensor buffer = as_real(landing.buffer);
  work->keep(buffer);
  const CallOptions call = options(opts.timeout);
  auto dtype = native_dtype(buffer.scalar_type());
  auto redop = native_op(opts.reduceOp);
  if (dtype && redop) {
    work->add_part(comm()->reduce(buffer.data_ptr(), rank_ == root ? buffer.data_ptr() : nullptr,
                                 buffer.numel(), *dtype, *redop, root, call));
  } else {
    at::Tensor rows;
    if (rank_ == root) {
      rows = at::empty({size_, buffer.numel()}, buffer.options());
      work->keep(rows);
      at::Tensor out = buffer;
      c10d::ReduceOp redop_copy = opts.reduceOp;
      work->then([rows, out, redop_copy]() mutable { reduce_rows(rows, redop_copy, out); });
    }
    work->add_part(comm()->gather(buffer.data_ptr(), rank_ == root ? rows.data_ptr() : nullptr,
                                 nbytes(buffer), DataType::kU8, root, call));
  }
  if (landing.staged() && rank_ == root) work->then([landing] { landing.land(); });
  PlaitWork::launch(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
  const CallName op = what("broadcast");
  check_single(tensors, op);
  check_root(opts.rootRank, size_, op);
  TORCH_CHECK(opts.rootTensor == 0, op, ": rootTensor must be 0, got ", opts.rootTensor);
  auto work = make_work(c10d::OpType::BROADCAST, "plait:broadcast", tensors, tensors);
  const Landing landing(tensors[0]);
  work->keep(landing.buffer);
  void* p = landing.buffer.data_ptr();
  work->add_part(comm()->broadcast(p, p, nbytes(landing.buffer), DataType::kU8,
                                  static_cast<int>(opts.rootRank), options(opts.timeout)));
  if (landing.staged()) work->then([landing] { landing.land(); });
  PlaitWork::launch(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const CallName op = what("all_gather");
  check_single(inputs, op);
  check_rank_list(outputs, size_, inputs[0], op.of(" output"));
  auto work = make_work(c10d::OpType::ALLGATHER, "plait:all_gather", inputs, outputs[0]);
  at::Tensor in = inputs[0].contiguous();
  at::Tensor flat = at::empty({static_cast<int64_t>(size_ * nbytes(in))}, at::kByte);
  work->keep(in);
  work->keep(flat);
  work->add_part(comm()->allgather(in.data_ptr(), flat.data_ptr(), nbytes(in), DataType::kU8,
                                  options(opts.timeout)));
  std::vector<at::Tensor> outs = outputs[0];
  work->then([flat, outs]() mutable { unpack_all(flat, outs); });
  PlaitWork::launch(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::all_gather_single(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  const CallName op = what("all_gather_into_tensor");
  check_cpu_dense(output, op);
  check_cpu_dense(input, op);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), op, ": output is ",
              output.scalar_type(), " but input is ", input.scalar_type());
  TORCH_CHECK(output.numel() == input.numel() * size_, op, ": output holds ", output.numel(),
              " elements, expected ", size_, " x ", input.numel());
  auto work = make_work(c10d::OpType::_ALLGATHER_BASE, "plait:all_gather_into_tensor", {input},
                        {output});
  at::Tensor in = input.contiguous();
  const Landing landing(output);
  work->keep(in);
  work->keep(landing.buffer);
  work->add_part(comm()->allgather(in.data_ptr(), landing.buffer.data_ptr(), nbytes(in),
                                  DataType::kU8, options(opts.timeout)));
  if (landing.staged()) work->then([landing] { landing.land(); });
  PlaitWork::launch(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const CallName op = what("all_gather_coalesced");
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_, op, ": expects ", size_,
              " output lists, got ", outputs.size());
  for (const auto& t : inputs) check_cpu_dense(t, op);
  for (const auto& list : outputs) {
    TORCH_CHECK(list.size() == inputs.size(), op, ": each output list must hold ",
                inputs.size(), " tensors, got ", list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      check_cpu_dense(list[i], op);
      check_same(list[i], inputs[i], op);
    }
  }
  std::vector<at::Tensor> flat_outs;
  for (const auto& list : outputs) flat_outs.insert(flat_outs.end(), list.begin(), list.end());
  auto work = make_work(c10d::OpType::ALLGATHER_COALESCED, "plait:all_gather", inputs, flat_outs);
  at::Tensor flat = allgather_packed(*work, inputs, options(opts.timeout));
  work->then([flat, flat_outs]() mutable { unpack_all(flat, flat_outs); });
  PlaitWork::launch(work);
  return work;
}

// One plait allgather of every input packed back to back; rank r's block of the result holds
// rank r's inputs, unpacked into each output at r's place.
c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::all_gather_single_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const CallName op = what("all_gather_into_tensor_coalesced");
  TORCH_CHECK(outputs.size() == inputs.size(), op, ": ", inputs.size(), " inputs but ",
              outputs.size(), " outputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_cpu_dense(inputs[i], op);
    check_cpu_dense(outputs[i], op);
    TORCH_CHECK(outputs[i].scalar_type() == inputs[i].scalar_type(), op, ": output ", i, " is ",
                outputs[i].scalar_type(), " but its input is ", inputs[i].scalar_type());
    TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * size_, op, ": output ", i, " holds ",
                outputs[i].numel(), " elements, expected ", size_, " x ", inputs[i].numel());
  }
  auto work = make_work(c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED,
                        "plait:all_gather_into_tensor_coalesced", inputs, outputs);
  at::Tensor flat = allgather_packed(*work, inputs, options(opts.timeout));
  // Each output's rank blocks, in the order the bytes arrive: for each rank, every input's
  // size. A non-contiguous output is filled through its staging copy, then landed.
  std::vector<Landing> landings;
  std::vector<at::Tensor> blocks;
  for (const auto& o : outputs) landings.emplace_back(o);
  for (int r = 0; r < size_; ++r)
    for (size_t i = 0; i < inputs.size(); ++i)
      blocks.push_back(landings[i].buffer.reshape({-1}).narrow(0, r * inputs[i].numel(),
                                                                inputs[i].numel()));
  work->then([flat, blocks, landings]() mutable {
    unpack_all(flat, blocks);
    for (const auto& l : landings) l.land();
  });
  PlaitWork::launch(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const CallName op = what("gather");
  check_single(inputs, op);
  check_root(opts.rootRank, size_, op);
  const int root = static_cast<int>(opts.rootRank);
  if (rank_ == root) {
    check_rank_list(outputs, size_, inputs[0], op.of(" output"));
  } else {
    TORCH_CHECK(outputs.empty(), op, ": only the root (rank ", root, ") takes output tensors");
  }
  std::vector<at::Tensor> outs = rank_ == root ? outputs[0] : std::vector<at::Tensor>{};
  auto work = make_work(c10d::OpType::GATHER, "plait:gather", inputs, outs);
  at::Tensor in = inputs[0].contiguous();
  work->keep(in);
  at::Tensor flat;
  if (rank_ == root) {
    flat = at::empty({static_cast<int64_t>(size_ * nbytes(in))}, at::kByte);
    work->keep(flat);
    work->then([flat, outs]() mutable { unpack_all(flat, outs); });
  }
  work->add_part(comm()->gather(in.data_ptr(), rank_ == root ? flat.data_ptr() : nullptr,
                               nbytes(in), DataType::kU8, root, options(opts.timeout)));
  PlaitWork::launch(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const CallName op = what("scatter");
  check_single(outputs, op);
  check_root(opts.rootRank, size_, op);
  const int root = static_cast<int>(opts.rootRank);
  if (rank_ == root) {
    check_rank_list(inputs, size_, outputs[0], op.of(" input"));
  } else {
    TORCH_CHECK(inputs.empty(), op, ": only the root (rank ", root, ") takes input tensors");
  }
  auto work = make_work(c10d::OpType::SCATTER, "plait:scatter",
                        rank_ == root ? inputs[0] : std::vector<at::Tensor>{}, outputs);
  at::Tensor flat;
  if (rank_ == root) {
    flat = pack_bytes(inputs[0]);
    work->keep(flat);
  }
  const Landing landing(outputs[0]);
  work->keep(landing.buffer);
  work->add_part(comm()->scatter(rank_ == root ? flat.data_ptr() : nullptr,
                                landing.buffer.data_ptr(), nbytes(landing.buffer),
                                DataType::kU8, root, options(opts.timeout)));
  if (landing.staged()) work->then([landing] { landing.land(); });
  PlaitWork::launch(work);
  return work;
}

}  // namespace plait::torch_backend
