// reduce_scatter and all_to_all of the plait process group (see collectives.cc for the rest).
#include <c10/util/Exception.h>

#include <numeric>

#include "process_group.h"
#include "tensors.h"

namespace plait::torch_backend {
namespace {

std::vector<size_t> prefix(const std::vector<size_t>& sizes) {
  std::vector<size_t> offsets(sizes.size());
  std::exclusive_scan(sizes.begin(), sizes.end(), offsets.begin(), size_t{0});
  return offsets;
}

}  // namespace

// `flat` holds every rank's blocks back to back (block r: counts[r] elements), reduced into
// this rank's block, written to `out`.
static void reduce_scatter_flat(const std::shared_ptr<Communicator>& comm, PlaitWork& work,
                                at::Tensor flat, std::vector<size_t> counts, at::Tensor out,
                                const c10d::ReduceOp& op, const CallOptions& call, int rank,
                                int size) {
  if (flat.is_complex()) {
    flat = at::view_as_real(flat);
    for (auto& c : counts) c *= 2;
  }
  const Landing landing(out);
  at::Tensor out_buffer = landing.buffer.is_complex() ? at::view_as_real(landing.buffer)
                                                       : landing.buffer;
  work.keep(flat);
  work.keep(out_buffer);
  auto dtype = native_dtype(flat.scalar_type());
  auto redop = native_op(op);
  const bool even = std::all_of(counts.begin(), counts.end(), [&](size_t c) { return c == counts[0]; });
  if (dtype && redop) {
    if (even)
      work.add_part(comm->reduce_scatter(flat.data_ptr(), out_buffer.data_ptr(), counts[0], *dtype,
                                         *redop, call));
    else
      work.add_part(comm->reduce_scatterv(flat.data_ptr(), out_buffer.data_ptr(), counts, *dtype,
                                          *redop, call));
  } else {
    // Every rank's whole input, then this rank's block reduced locally.
    at::Tensor rows = at::empty({size, flat.numel()}, flat.options());
    work.keep(rows);
    work.add_part(comm->allgather(flat.data_ptr(), rows.data_ptr(), nbytes(flat), DataType::kU8,
                                  call));
    const size_t begin = prefix(counts)[rank];
    const size_t count = counts[rank];
    work.then([rows, out_buffer, op, begin, count]() mutable {
      at::Tensor mine = rows.narrow(1, static_cast<int64_t>(begin), static_cast<int64_t>(count));
      reduce_rows(mine, op, out_buffer);
    });
  }
  if (landing.staged()) work.then([landing] { landing.land(); });
}

c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const CallName op = what("reduce_scatter");
  check_single(outputs, op);
  check_reduce_op(opts.reduceOp, outputs[0], op);
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_, op,
              ": expects one list of ", size_, " input tensors");
  std::vector<size_t> counts;
  for (const auto& t : inputs[0]) {
    check_cpu_dense(t, op);
    TORCH_CHECK(t.scalar_type() == outputs[0].scalar_type(), op, ": input is ", t.scalar_type(),
                " but output is ", outputs[0].scalar_type());
    counts.push_back(static_cast<size_t>(t.numel()));
  }
  TORCH_CHECK(inputs[0][rank_].numel() == outputs[0].numel(), op, ": this rank's block has ",
              inputs[0][rank_].numel(), " elements but the output ", outputs[0].numel());
  auto work = make_work(c10d::OpType::REDUCE_SCATTER, "plait:reduce_scatter", inputs[0], outputs);
  std::vector<at::Tensor> flat_parts;
  for (const auto& t : inputs[0]) flat_parts.push_back(t.reshape({-1}));
  reduce_scatter_flat(comm(), *work, at::cat(flat_parts), counts, outputs[0], opts.reduceOp,
                      options(opts.timeout), rank_, size_);
  PlaitWork::launch(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::reduce_scatter_single(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const CallName op = what("reduce_scatter_tensor");
  check_cpu_dense(output, op);
  check_cpu_dense(input, op);
  check_reduce_op(opts.reduceOp, output, op);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), op, ": input is ", input.scalar_type(),
              " but output is ", output.scalar_type());
  TORCH_CHECK(input.numel() == output.numel() * size_, op, ": input holds ", input.numel(),
              " elements, expected ", size_, " x ", output.numel());
  auto work =
      make_work(c10d::OpType::_REDUCE_SCATTER_BASE, "plait:reduce_scatter_tensor", {input}, {output});
  std::vector<size_t> counts(size_, static_cast<size_t>(output.numel()));
  reduce_scatter_flat(comm(), *work, input.contiguous(), counts, output, opts.reduceOp,
                      options(opts.timeout), rank_, size_);
  PlaitWork::launch(work);
  return work;
}

// One Work over one plait reduce-scatter per pair: each pair may have its own type and size,
// and plait runs the calls side by side.
c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::reduce_scatter_single_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const CallName op = what("reduce_scatter_tensor_coalesced");
  TORCH_CHECK(outputs.size() == inputs.size(), op, ": ", inputs.size(), " inputs but ",
              outputs.size(), " outputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_cpu_dense(outputs[i], op);
    check_cpu_dense(inputs[i], op);
    check_reduce_op(opts.reduceOp, outputs[i], op);
    TORCH_CHECK(outputs[i].scalar_type() == inputs[i].scalar_type(), op, ": input ", i, " is ",
                inputs[i].scalar_type(), " but its output is ", outputs[i].scalar_type());
    TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * size_, op, ": input ", i, " holds ",
                inputs[i].numel(), " elements, expected ", size_, " x ", outputs[i].numel());
  }
  auto work = make_work(c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED,
                        "plait:reduce_scatter_tensor_coalesced", inputs, outputs);
  const CallOptions call = options(opts.timeout);
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<size_t> counts(size_, static_cast<size_t>(outputs[i].numel()));
    reduce_scatter_flat(comm(), *work, inputs[i].contiguous(), counts, outputs[i], opts.reduceOp,
                        call, rank_, size_);
  }
  PlaitWork::launch(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::all_to_all_single(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
    std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) {
  const CallName op = what("all_to_all_single");
  check_cpu_dense(output, op);
  check_cpu_dense(input, op);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), op, ": input is ", input.scalar_type(),
              " but output is ", output.scalar_type());
  // Splits count rows of dimension 0; no splits means equal blocks.
  auto blocks = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* side) {
    std::vector<size_t> bytes(size_);
    if (splits.empty()) {
      TORCH_CHECK(t.numel() % size_ == 0, op, ": ", side, " of ", t.numel(),
                  " elements does not split evenly over ", size_, " ranks");
      std::fill(bytes.begin(), bytes.end(), nbytes(t) / size_);
      return bytes;
    }
    TORCH_CHECK(static_cast<int>(splits.size()) == size_, op, ": ", side, " split sizes list ",
                splits.size(), " entries for ", size_, " ranks");
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const size_t row_bytes = rows == 0 ? 0 : nbytes(t) / rows;
    int64_t total = 0;
    for (int r = 0; r < size_; ++r) {
      TORCH_CHECK(splits[r] >= 0, op, ": negative split size ", splits[r]);
      total += splits[r];
      bytes[r] = static_cast<size_t>(splits[r]) * row_bytes;
    }
    TORCH_CHECK(total == rows, op, ": ", side, " split sizes add up to ", total, " but the tensor has ",
                rows, " rows");
    return bytes;
  };
  std::vector<size_t> send_bytes = blocks(input, input_splits, "input");
  std::vector<size_t> recv_bytes = blocks(output, output_splits, "output");
  auto work = make_work(c10d::OpType::ALLTOALL_BASE, "plait:all_to_all", {input}, {output});
  at::Tensor in = input.contiguous();
  const Landing landing(output);
  work->keep(in);
  work->keep(landing.buffer);
  work->add_part(comm()->alltoallv(in.data_ptr(), send_bytes, prefix(send_bytes),
                                  landing.buffer.data_ptr(), recv_bytes, prefix(recv_bytes),
                                  DataType::kU8, options(opts.timeout)));
  if (landing.staged()) work->then([landing] { landing.land(); });
  PlaitWork::launch(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions& opts) {
  const CallName op = what("all_to_all");
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              op, ": expects ", size_, " input and output tensors, got ", inputs.size(), " and ",
              outputs.size());
  std::vector<size_t> send_bytes, recv_bytes;
  for (int r = 0; r < size_; ++r) {
    check_cpu_dense(inputs[r], op);
    check_cpu_dense(outputs[r], op);
    TORCH_CHECK(inputs[r].scalar_type() == outputs[r].scalar_type(), op, ": input is ",
                inputs[r].scalar_type(), " but output is ", outputs[r].scalar_type());
    send_bytes.push_back(nbytes(inputs[r]));
    recv_bytes.push_back(nbytes(outputs[r]));
  }
  auto work = make_work(c10d::OpType::ALLTOALL, "plait:all_to_all", inputs, outputs);
  at::Tensor in = pack_bytes(inputs);
  const size_t total = std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t{0});
  at::Tensor flat = at::empty({static_cast<int64_t>(total)}, at::kByte);
  work->keep(in);
  work->keep(flat);
  work->add_part(comm()->alltoallv(in.data_ptr(), send_bytes, prefix(send_bytes), flat.data_ptr(),
                                  recv_bytes, prefix(recv_bytes), DataType::kU8,
                                  options(opts.timeout)));
  std::vector<at::Tensor> outs = outputs;
  work->then([flat, outs]() mutable { unpack_all(flat, outs); });
  PlaitWork::launch(work);
  return work;
}

}  // namespace plait::torch_backend
