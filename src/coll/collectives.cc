// Argument checks and buffer layout of each collective (schedule.h documents the layouts).
#include "coll/communicator_impl.h"

namespace plait::coll {
namespace {

bool in_place(const void* send, const void* recv) { return send == nullptr || send == recv; }

std::vector<size_t> prefix_offsets(const std::vector<size_t>& counts) {
  std::vector<size_t> displs(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) displs[i] = displs[i - 1] + counts[i - 1];
  return displs;
}

}  // namespace

WorkPtr CommunicatorImpl::allreduce(const void* send, void* recv, size_t count, DataType dtype,
                                    ReduceOp op, const CallOptions& opts) {
  check_buffer(recv, checked_elems(count, 1, dtype, "allreduce"), "recv", "allreduce");
  Call c = begin_call(CollOp::kAllreduce, dtype, op, 0, count);
  c.args.in_place = in_place(send, recv);
  c.input = c.args.in_place ? recv : send;
  c.output = recv;
  if (op == ReduceOp::kAvg) c.avg_data = recv, c.avg_count = count;
  return enqueue(std::move(c), opts);
}

WorkPtr CommunicatorImpl::reduce(const void* send, void* recv, size_t count, DataType dtype,
                                 ReduceOp op, int root, const CallOptions& opts) {
  check_root(root, "reduce");
  checked_elems(count, 1, dtype, "reduce");
  const bool is_root = rank() == root;
  if (is_root) check_buffer(recv, count, "recv", "reduce");
  else check_buffer(send, count, "send", "reduce");
  Call c = begin_call(CollOp::kReduce, dtype, op, root, count);
  c.args.in_place = is_root && in_place(send, recv);
  c.input = c.args.in_place ? recv : send;
  c.input_elems = count;
  c.output = is_root ? recv : nullptr;
  c.output_elems = count;  // non-roots reduce partial results into a stand-in
  if (is_root && op == ReduceOp::kAvg) c.avg_data = recv, c.avg_count = count;
  return enqueue(std::move(c), opts);
}

WorkPtr CommunicatorImpl::broadcast(const void* send, void* recv, size_t count, DataType dtype,
                                    int root, const CallOptions& opts) {
  check_root(root, "broadcast");
  check_buffer(recv, checked_elems(count, 1, dtype, "broadcast"), "recv", "broadcast");
  Call c = begin_call(CollOp::kBroadcast, dtype, ReduceOp::kSum, root, count);
  const bool is_root = rank() == root;
  c.args.in_place = !is_root || in_place(send, recv);
  c.input = c.args.in_place ? recv : send;
  c.output = recv;
  return enqueue(std::move(c), opts);
}

WorkPtr CommunicatorImpl::allgather(const void* send, void* recv, size_t count, DataType dtype,
                                    const CallOptions& opts) {
  check_buffer(recv, checked_elems(count, size(), dtype, "allgather"), "recv", "allgather");
  Call c = begin_call(CollOp::kAllgather, dtype, ReduceOp::kSum, 0, count);
  c.args.in_place = in_place(send, recv);
  c.input = c.args.in_place ? static_cast<char*>(recv) + rank() * count * dtype_size(dtype) : send;
  c.output = recv;
  return enqueue(std::move(c), opts);
}

WorkPtr CommunicatorImpl::allgatherv(const void* send, void* recv,
                                     const std::vector<size_t>& recv_counts, DataType dtype,
                                     const CallOptions& opts) {
  if (recv_counts.size() != static_cast<size_t>(size()))
    throw invalid_usage("recv_counts has " + std::to_string(recv_counts.size()) +
                            " entries, expected one per rank (" + std::to_string(size()) + ")",
                        {.rank = rank(), .op = "allgatherv"});
  check_buffer(recv, checked_sum(recv_counts, dtype, "allgatherv"), "recv", "allgatherv");
  Call c = begin_call(CollOp::kAllgatherv, dtype, ReduceOp::kSum, 0, recv_counts[rank()]);
  c.args.counts = recv_counts;
  c.args.displs = prefix_offsets(recv_counts);
  c.args.in_place = in_place(send, recv);
  c.input = c.args.in_place ? static_cast<char*>(recv) + c.args.displs[rank()] * dtype_size(dtype) : send;
  c.output = recv;
  return enqueue(std::move(c), opts);
}

WorkPtr CommunicatorImpl::reduce_scatter(const void* send, void* recv, size_t recv_count,
                                         DataType dtype, ReduceOp op, const CallOptions& opts) {
  checked_elems(recv_count, size(), dtype, "reduce_scatter");
  check_buffer(recv, recv_count, "recv", "reduce_scatter");
  Call c = begin_call(CollOp::kReduceScatter, dtype, op, 0, recv_count);
  c.args.in_place = in_place(send, recv);
  c.input = c.args.in_place ? recv : send;
  c.output = recv;
  if (op == ReduceOp::kAvg) c.avg_data = recv, c.avg_count = recv_count;
  return enqueue(std::move(c), opts);
}

WorkPtr CommunicatorImpl::reduce_scatterv(const void* send, void* recv,
                                          const std::vector<size_t>& recv_counts, DataType dtype,
                                          ReduceOp op, const CallOptions& opts) {
  if (recv_counts.size() != static_cast<size_t>(size()))
    throw invalid_usage("recv_counts has " + std::to_string(recv_counts.size()) +
                            " entries, expected one per rank (" + std::to_string(size()) + ")",
                        {.rank = rank(), .op = "reduce_scatterv"});
  checked_sum(recv_counts, dtype, "reduce_scatterv");
  check_buffer(recv, recv_counts[rank()], "recv", "reduce_scatterv");
  Call c = begin_call(CollOp::kReduceScatterv, dtype, op, 0, recv_counts[rank()]);
  c.args.counts = recv_counts;
  c.args.displs = prefix_offsets(recv_counts);
  c.args.in_place = in_place(send, recv);
  c.input = c.args.in_place ? recv : send;
  c.output = recv;
  if (op == ReduceOp::kAvg) c.avg_data = recv, c.avg_count = recv_counts[rank()];
  return enqueue(std::move(c), opts);
}

WorkPtr CommunicatorImpl::alltoall(const void* send, void* recv, size_t count, DataType dtype,
                                   const CallOptions& opts) {
  check_buffer(recv, checked_elems(count, size(), dtype, "alltoall"), "recv", "alltoall");
  if (in_place(send, recv) && count > 0)
    throw invalid_usage("alltoall needs distinct send and recv buffers", {.rank = rank(), .op = "alltoall"});
  Call c = begin_call(CollOp::kAlltoall, dtype, ReduceOp::kSum, 0, count);
  c.input = send;
  c.output = recv;
  return enqueue(std::move(c), opts);
}

WorkPtr CommunicatorImpl::alltoallv(const void* send, const std::vector<size_t>& send_counts,
                                    const std::vector<size_t>& send_displs, void* recv,
                                    const std::vector<size_t>& recv_counts,
                                    const std::vector<size_t>& recv_displs, DataType dtype,
                                    const CallOptions& opts) {
  const size_t n = static_cast<size_t>(size());
  if (send_counts.size() != n || send_displs.size() != n || recv_counts.size() != n ||
      recv_displs.size() != n)
    throw invalid_usage("alltoallv count and displacement vectors need one entry per rank (" +
                            std::to_string(n) + ")",
                        {.rank = rank(), .op = "alltoallv"});
  const size_t recv_total = checked_sum(recv_counts, dtype, "alltoallv");
  const size_t send_total = checked_sum(send_counts, dtype, "alltoallv");
  check_buffer(recv, recv_total, "recv", "alltoallv");
  check_buffer(send, send_total, "send", "alltoallv");
  if (send == recv && send_total > 0)
    throw invalid_usage("alltoallv needs distinct send and recv buffers", {.rank = rank(), .op = "alltoallv"});
  Call c = begin_call(CollOp::kAlltoallv, dtype, ReduceOp::kSum, 0, recv_total);
  c.args.counts = recv_counts;
  c.args.displs = recv_displs;
  c.args.send_counts = send_counts;
  c.args.send_displs = send_displs;
  c.input = send;
  c.output = recv;
  return enqueue(std::move(c), opts);
}

WorkPtr CommunicatorImpl::gather(const void* send, void* recv, size_t count, DataType dtype,
                                 int root, const CallOptions& opts) {
  check_root(root, "gather");
  const bool is_root = rank() == root;
  const size_t total = checked_elems(count, size(), dtype, "gather");
  if (is_root) check_buffer(recv, total, "recv", "gather");
  Call c = begin_call(CollOp::kGather, dtype, ReduceOp::kSum, root, count);
  c.args.in_place = is_root && in_place(send, recv);
  c.input = c.args.in_place ? static_cast<char*>(recv) + rank() * count * dtype_size(dtype) : send;
  c.input_elems = count;
  c.output = is_root ? recv : nullptr;
  c.output_elems = count * size();  // tree algorithms forward subtrees through it
  if (!is_root) check_buffer(send, count, "send", "gather");
  return enqueue(std::move(c), opts);
}

WorkPtr CommunicatorImpl::scatter(const void* send, void* recv, size_t count, DataType dtype,
                                  int root, const CallOptions& opts) {
  check_root(root, "scatter");
  const bool is_root = rank() == root;
  const size_t total = checked_elems(count, size(), dtype, "scatter");
  check_buffer(recv, count, "recv", "scatter");
  if (is_root) check_buffer(send, total, "send", "scatter");
  Call c = begin_call(CollOp::kScatter, dtype, ReduceOp::kSum, root, count);
  c.input = is_root ? send : nullptr;
  c.input_elems = count * size();  // tree algorithms forward subtrees through it
  c.output = recv;
  return enqueue(std::move(c), opts);
}

WorkPtr CommunicatorImpl::barrier(const CallOptions& opts) {
  Call c = begin_call(CollOp::kBarrier, DataType::kU8, ReduceOp::kSum, 0, 0);
  return enqueue(std::move(c), opts);
}

}  // namespace plait::coll
