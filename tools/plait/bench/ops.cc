#include "plait/bench/ops.h"

#include "core/element.h"

#include <algorithm>
#include <cstring>

#include "core/half.h"

namespace plait::cli {
namespace {

// --check inputs are small non-negative integers chosen so that every partial result a
// reduction can form, in any order, stays an exact integer of the dtype: then the
// communicator's result must equal the reference bit for bit, in f16, bf16 and i8 too.

// Largest L such that every integer in [0, L] is exact in the dtype. Capped: values stay
// small anyway, and a cap keeps the arithmetic below in double exact.
double exact_limit(DataType dtype) {
  switch (dtype) {
    case DataType::kI8: return 127;
    case DataType::kU8: return 255;
    case DataType::kBF16: return 256;
    case DataType::kF16: return 2048;
    default: return 1 << 20;
  }
}

// Data that is only moved, never combined: different per source rank and per position,
// so a block that lands in the wrong place or comes from the wrong rank shows.
double plain_value(int rank, size_t j) {
  return static_cast<double>((static_cast<size_t>(rank) * 7 + j) % 101);
}

// What rank r contributes at position j of a reduction.
double reduce_value(const OpShape& s, int r, size_t j) {
  const double limit = exact_limit(s.dtype);
  const size_t n = static_cast<size_t>(s.size);
  const size_t ur = static_cast<size_t>(r);
  switch (s.redop) {
    case ReduceOp::kSum: {
      // Values in [0, m] with n*m <= limit; beyond `limit` ranks, one-hot ones (sum 1).
      const size_t m = std::min<size_t>(static_cast<size_t>(limit) / n, 15);
      if (m == 0) return j % n == ur ? 1 : 0;
      return static_cast<double>((ur + j) % (m + 1));
    }
    case ReduceOp::kProd:
      // At most one rank contributes a 2 per position, so every partial product is 1 or 2.
      return (ur + j) % (n + 1) == 0 ? 2 : 1;
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return plain_value(r, j);
    case ReduceOp::kAvg: {
      // c(j) plus +1/-1 on paired ranks (0 on an odd last one): the sum is exactly n*c(j),
      // so the mean c(j) is exact even with integer division, and any subset's partial sum
      // stays within n*(c+1) <= limit.
      const size_t per_rank = std::min<size_t>(static_cast<size_t>(limit) / n, 16);
      if (per_rank < 2) return n <= limit ? 1 : 0;
      const double c = 1 + static_cast<double>(j % (per_rank - 1));
      if (ur + 1 == n && n % 2 == 1) return c;
      return ur % 2 == 0 ? c + 1 : c - 1;
    }
  }
  return 0;
}

double reduced(const OpShape& s, size_t j) {
  double acc = reduce_value(s, 0, j);
  for (int r = 1; r < s.size; ++r) {
    const double v = reduce_value(s, r, j);
    switch (s.redop) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
  }
  return s.redop == ReduceOp::kAvg ? acc / s.size : acc;
}

int next_rank(const OpShape& s) { return (s.rank + 1) % s.size; }
int prev_rank(const OpShape& s) { return (s.rank + s.size - 1) % s.size; }
size_t all_blocks(const OpShape& s) { return static_cast<size_t>(s.size) * s.count; }
size_t one_block(const OpShape& s) { return s.count; }
size_t no_elements(const OpShape&) { return 0; }
size_t at_start(const OpShape&) { return 0; }
double this_ranks_reduce_input(const OpShape& s, size_t i) { return reduce_value(s, s.rank, i); }
double this_ranks_plain_input(const OpShape& s, size_t i) { return plain_value(s.rank, i); }
std::optional<double> nothing_expected(const OpShape&, size_t) { return std::nullopt; }

double factor_one(int) { return 1.0; }
double factor_zero(int) { return 0.0; }
double factor_n_minus_1_over_n(int n) { return n > 0 ? static_cast<double>(n - 1) / n : 0.0; }
double factor_allreduce(int n) { return 2.0 * factor_n_minus_1_over_n(n); }

// Below 2^31 as send/recv require; spells "benc".
constexpr uint32_t kSendrecvTag = 0x62656e63;

const OpSpec kOps[] = {
    {BenchOp::kAllreduce, "allreduce", true, false, true, false, factor_allreduce, one_block,
     one_block, at_start,
     [](Communicator& c, const OpShape& s, const OpBuffers& b, const CallOptions& o) {
       return Pending{c.allreduce(b.in, b.out, s.count, s.dtype, s.redop, o), nullptr};
     },
     this_ranks_reduce_input,
     [](const OpShape& s, size_t i) -> std::optional<double> { return reduced(s, i); }},

    {BenchOp::kReduce, "reduce", true, true, true, false, factor_one, one_block,
     [](const OpShape& s) { return s.rank == s.root ? s.count : 0; }, at_start,
     [](Communicator& c, const OpShape& s, const OpBuffers& b, const CallOptions& o) {
       return Pending{c.reduce(b.in, b.out, s.count, s.dtype, s.redop, s.root, o), nullptr};
     },
     this_ranks_reduce_input,
     [](const OpShape& s, size_t i) -> std::optional<double> {
       if (s.rank != s.root) return std::nullopt;
       return reduced(s, i);
     }},

    {BenchOp::kBroadcast, "broadcast", false, true, true, false, factor_one, one_block,
     one_block, at_start,
     [](Communicator& c, const OpShape& s, const OpBuffers& b, const CallOptions& o) {
       return Pending{c.broadcast(b.in, b.out, s.count, s.dtype, s.root, o), nullptr};
     },
     this_ranks_plain_input,
     [](const OpShape& s, size_t i) -> std::optional<double> { return plain_value(s.root, i); }},

    {BenchOp::kAllgather, "allgather", false, false, true, true, factor_n_minus_1_over_n,
     one_block, all_blocks,
     [](const OpShape& s) { return static_cast<size_t>(s.rank) * s.count; },
     [](Communicator& c, const OpShape& s, const OpBuffers& b, const CallOptions& o) {
       // In place, this rank's block already sits at its offset in out (communicator.h).
       return Pending{c.allgather(s.in_place ? nullptr : b.in, b.out, s.count, s.dtype, o),
                      nullptr};
     },
     this_ranks_plain_input,
     [](const OpShape& s, size_t i) -> std::optional<double> {
       return plain_value(static_cast<int>(i / s.count), i % s.count);
     }},

    {BenchOp::kReduceScatter, "reduce_scatter", true, false, true, true,
     factor_n_minus_1_over_n, all_blocks, one_block, at_start,
     [](Communicator& c, const OpShape& s, const OpBuffers& b, const CallOptions& o) {
       // In place the result lands at the start of the one buffer, like MPI.
       return Pending{c.reduce_scatter(b.in, b.out, s.count, s.dtype, s.redop, o), nullptr};
     },
     this_ranks_reduce_input,
     [](const OpShape& s, size_t i) -> std::optional<double> {
       return reduced(s, static_cast<size_t>(s.rank) * s.count + i);
     }},

    {BenchOp::kAlltoall, "alltoall", false, false, false, true, factor_n_minus_1_over_n,
     all_blocks, all_blocks, at_start,
     [](Communicator& c, const OpShape& s, const OpBuffers& b, const CallOptions& o) {
       return Pending{c.alltoall(b.in, b.out, s.count, s.dtype, o), nullptr};
     },
     this_ranks_plain_input,
     [](const OpShape& s, size_t i) -> std::optional<double> {
       const int from = static_cast<int>(i / s.count);
       return plain_value(from, static_cast<size_t>(s.rank) * s.count + i % s.count);
     }},

    {BenchOp::kGather, "gather", false, true, false, true, factor_n_minus_1_over_n, one_block,
     [](const OpShape& s) { return s.rank == s.root ? all_blocks(s) : 0; }, at_start,
     [](Communicator& c, const OpShape& s, const OpBuffers& b, const CallOptions& o) {
       return Pending{c.gather(b.in, b.out, s.count, s.dtype, s.root, o), nullptr};
     },
     this_ranks_plain_input,
     [](const OpShape& s, size_t i) -> std::optional<double> {
       return plain_value(static_cast<int>(i / s.count), i % s.count);
     }},

    {BenchOp::kScatter, "scatter", false, true, false, true, factor_n_minus_1_over_n,
     [](const OpShape& s) { return s.rank == s.root ? all_blocks(s) : 0; }, one_block, at_start,
     [](Communicator& c, const OpShape& s, const OpBuffers& b, const CallOptions& o) {
       return Pending{c.scatter(b.in, b.out, s.count, s.dtype, s.root, o), nullptr};
     },
     this_ranks_plain_input,
     [](const OpShape& s, size_t i) -> std::optional<double> {
       return plain_value(s.root, static_cast<size_t>(s.rank) * s.count + i);
     }},

    {BenchOp::kSendrecv, "sendrecv", false, false, false, false, factor_one, one_block,
     one_block, at_start,
     [](Communicator& c, const OpShape& s, const OpBuffers& b, const CallOptions& o) {
       // The recv goes first so that every rank has one posted before the ring's sends.
       WorkPtr recv = c.recv(b.out, s.count, s.dtype, prev_rank(s), kSendrecvTag, o);
       WorkPtr send = c.send(b.in, s.count, s.dtype, next_rank(s), kSendrecvTag, o);
       return Pending{std::move(recv), std::move(send)};
     },
     this_ranks_plain_input,
     [](const OpShape& s, size_t i) -> std::optional<double> {
       return plain_value(prev_rank(s), i);
     }},

    // Pairs (0, 1), (2, 3), ...: the even rank sends and waits for the answer; the odd one
    // answers once the message is in. The time is a round trip (ucx_perftest and OSU report
    // half of it as the latency). With an odd number of ranks the last one only waits.
    {BenchOp::kPingpong, "pingpong", false, false, false, false, factor_one, one_block,
     one_block, at_start,
     [](Communicator& c, const OpShape& s, const OpBuffers& b, const CallOptions& o) {
       const int partner = s.rank ^ 1;
       if (partner >= s.size) return Pending{nullptr, nullptr};
       if (s.rank % 2 == 0) {
         WorkPtr recv = c.recv(b.out, s.count, s.dtype, partner, kSendrecvTag, o);
         WorkPtr send = c.send(b.in, s.count, s.dtype, partner, kSendrecvTag, o);
         return Pending{std::move(recv), std::move(send)};
       }
       c.recv(b.out, s.count, s.dtype, partner, kSendrecvTag, o)->wait();
       return Pending{c.send(b.in, s.count, s.dtype, partner, kSendrecvTag, o), nullptr};
     },
     this_ranks_plain_input,
     [](const OpShape& s, size_t i) -> std::optional<double> {
       if ((s.rank ^ 1) >= s.size) return std::nullopt;
       return plain_value(s.rank ^ 1, i);
     }},

    {BenchOp::kBarrier, "barrier", false, false, false, false, factor_zero, no_elements,
     no_elements, at_start,
     [](Communicator& c, const OpShape&, const OpBuffers&, const CallOptions& o) {
       return Pending{c.barrier(o), nullptr};
     },
     [](const OpShape&, size_t) { return 0.0; }, nothing_expected},
};

}  // namespace

const OpSpec& op_spec(BenchOp op) {
  for (const OpSpec& spec : kOps)
    if (spec.op == op) return spec;
  return kOps[0];
}

std::optional<BenchOp> parse_bench_op(std::string_view name) {
  for (const OpSpec& spec : kOps)
    if (spec.name == name) return spec.op;
  return std::nullopt;
}

std::string_view to_string(BenchOp op) { return op_spec(op).name; }

std::string_view bench_op_names() {
  return "allreduce reduce broadcast allgather reduce_scatter alltoall gather scatter "
         "sendrecv pingpong barrier";
}

size_t count_for_bytes(const OpSpec& spec, size_t bytes, int nranks, DataType dtype) {
  if (spec.op == BenchOp::kBarrier) return 0;
  const size_t per = dtype_size(dtype) * (spec.bytes_are_total ? nranks : 1);
  return per == 0 ? 0 : bytes / per;
}

size_t bytes_for_count(const OpSpec& spec, size_t count, int nranks, DataType dtype) {
  if (spec.op == BenchOp::kBarrier) return 0;
  return count * dtype_size(dtype) * (spec.bytes_are_total ? nranks : 1);
}

void fill_input(const OpSpec& spec, const OpShape& shape, void* in) {
  const size_t n = spec.input_count(shape);
  for (size_t i = 0; i < n; ++i) store_element(shape.dtype, in, i, spec.input(shape, i));
}

int64_t count_wrong(const OpSpec& spec, const OpShape& shape, const void* out) {
  const size_t n = spec.output_count(shape);
  int64_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    const std::optional<double> want = spec.expected(shape, i);
    // NaN (the poison left in an element nobody wrote) never compares equal.
    if (want && !(load_element(shape.dtype, out, i) == *want)) ++wrong;
  }
  return wrong;
}

}  // namespace plait::cli
