// compress::allreduce: each method moved in the form its wire allows (see the header).
#include "plait/compressed_allreduce.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "compress/compressors.h"
#include "compress/kernels.h"
#include "compress/power_sgd.h"
#include "compress/quantized_sum.h"
#include "core/clock.h"

namespace plait::compress {
namespace {

using detail::PowerSgdShape;

class Phases {
 public:
  explicit Phases(AllreduceStats* stats) : stats_(stats), start_(Clock::now()) {}
  void compressed() { stats_->compress_seconds += lap(); }
  void communicated() { stats_->communicate_seconds += lap(); }
  void decompressed() { stats_->decompress_seconds += lap(); }

 private:
  double lap() {
    const Clock::time_point now = Clock::now();
    const double s = std::chrono::duration<double>(now - start_).count();
    start_ = now;
    return s;
  }
  AllreduceStats* stats_;
  Clock::time_point start_;
};

void wait(const WorkPtr& work) { work->wait(); }

void finish(float* data, size_t count, bool average, int ranks) {
  if (average && ranks > 1) kernels::scale(data, 1.0f / static_cast<float>(ranks), count);
}

// fp16, bf16: the 16-bit values summed by the allreduce itself.
void cast_path(Communicator& comm, float* data, size_t count, const Compressor& c, State* state,
               AllreduceStats* st, Phases& ph) {
  std::vector<std::byte> wire(c.max_wire_bytes(count));
  st->wire_bytes = c.compress(data, count, wire.data(), state);
  ph.compressed();
  const DataType dtype = c.method() == Method::kFp16 ? DataType::kF16 : DataType::kBF16;
  wait(comm.allreduce(wire.data(), wire.data(), count, dtype, ReduceOp::kSum));
  ph.communicated();
  c.decompress(wire.data(), wire.size(), data, count);
  st->path = c.method() == Method::kFp16 ? "allreduce f16" : "allreduce bf16";
}

// int8: shared scales; every rank quantises at the levels whose sum over the ranks the wire's
// integers hold (quantized_sum.h), and an integer allreduce sums the quanta.
void int8_path(Communicator& comm, float* data, size_t count, const Compressor& c, State* state,
               AllreduceStats* st, Phases& ph) {
  const Params& p = c.params();
  const size_t chunks = (count + p.chunk - 1) / p.chunk;
  float* resid = detail::feedback(count, state, c.method());
  const float* src = data;
  if (resid) {
    kernels::add(resid, data, count);
    src = resid;
  }
  std::vector<float> scales(chunks);
  detail::for_each_chunk(count, p.chunk, [&](size_t c, size_t first, size_t len) {
    scales[c] = kernels::max_abs(src + first, len);
  });
  ph.compressed();
  wait(comm.allreduce(scales.data(), scales.data(), chunks, DataType::kF32, ReduceOp::kMax));
  ph.communicated();
  const detail::QuantizedSum plan = detail::plan_quantized_sum(comm.size(), p.levels);
  std::vector<int8_t> q(count);
  const uint64_t noise = detail::call_noise(p, state);
  detail::for_each_chunk(count, p.chunk, [&](size_t c, size_t first, size_t len) {
    kernels::quantize_int8(src + first, q.data() + first, resid ? resid + first : nullptr, len, scales[c],
                           plan.levels, kernels::mix64(noise ^ (static_cast<uint64_t>(comm.rank()) << 40) ^ c));
  });
  if (state) state->calls += 1;
  std::vector<std::byte> packed;
  void* wire = q.data();
  if (plan.wire != detail::QuantizedSum::Wire::kI8) {
    packed.resize(plan.bytes(count));
    detail::pack_quanta(plan, q.data(), count, packed.data());
    wire = packed.data();
  }
  st->wire_bytes = chunks * 4 + plan.bytes(count);
  ph.compressed();
  wait(comm.allreduce(wire, wire, plan.elements(count), plan.dtype(), ReduceOp::kSum));
  ph.communicated();
  detail::for_each_chunk(count, p.chunk, [&](size_t c, size_t first, size_t len) {
    detail::dequantize_sums(plan, wire, first, len, scales[c] / static_cast<float>(plan.levels), data + first);
  });
  st->path = "allreduce " + plan.describe();
}

// randomk: the same indices on every rank, so the values are summed in place.
void random_k_path(Communicator& comm, float* data, size_t count, const Compressor& c, State* state,
                   AllreduceStats* st, Phases& ph) {
  std::vector<std::byte> wire(c.max_wire_bytes(count));
  st->wire_bytes = c.compress(data, count, wire.data(), state);
  ph.compressed();
  const size_t k = (wire.size() - 8) / 4;
  wait(comm.allreduce(wire.data() + 8, wire.data() + 8, k, DataType::kF32, ReduceOp::kSum));
  ph.communicated();
  c.decompress(wire.data(), wire.size(), data, count);
  st->path = "allreduce f32 of k values";
}

// powersgd: P summed and orthonormalised, then Q = M^T P summed; data = P Q^T.
void power_sgd_path(Communicator& comm, float* data, size_t count, const Compressor& c, State* state,
                    bool average, AllreduceStats* st, Phases& ph) {
  const PowerSgdShape s = detail::power_sgd_shape(c.params(), count);
  float* resid = detail::feedback(count, state, c.method());
  const float* m = resid ? resid : data;
  std::vector<float> pt(s.p_values()), qt(s.q_values());
  if (state && state->q.size() == s.q_values())
    qt = state->q;
  else
    detail::power_sgd_initial_q(qt.data(), s, detail::call_noise(c.params(), state));
  if (resid)
    detail::power_sgd_add_mq(resid, data, count, s, qt.data(), pt.data());  // error feedback, same pass
  else
    detail::power_sgd_mq(data, count, s, qt.data(), pt.data());
  ph.compressed();
  wait(comm.allreduce(pt.data(), pt.data(), pt.size(), DataType::kF32, ReduceOp::kSum));
  ph.communicated();
  detail::power_sgd_orthonormalize(pt.data(), s);
  detail::power_sgd_mtp(m, count, s, pt.data(), qt.data());
  ph.compressed();
  wait(comm.allreduce(qt.data(), qt.data(), qt.size(), DataType::kF32, ReduceOp::kSum));
  ph.communicated();
  if (average && comm.size() > 1) kernels::scale(qt.data(), 1.0f / static_cast<float>(comm.size()), qt.size());
  // data = P Q^T; the residual is what this rank's corrected values lack of it.
  if (state) {
    detail::power_sgd_reconstruct_residual(pt.data(), qt.data(), s, data, state->residual.data(), count);
    state->q = qt;
    state->calls += 1;
  } else {
    detail::power_sgd_reconstruct(pt.data(), qt.data(), s, data, count, false);
  }
  st->wire_bytes = 4 * (pt.size() + qt.size());
  st->path = "allreduce P, Q (rank " + std::to_string(s.rank) + ")";
}

// sign, topk, threshold: every rank's wire to every rank, added in rank order.
void gather_path(Communicator& comm, float* data, size_t count, const Compressor& c, State* state,
                 AllreduceStats* st, Phases& ph) {
  const int n = comm.size();
  const size_t room = c.max_wire_bytes(count);
  std::vector<std::byte> wire(room);
  const size_t bytes = c.compress(data, count, wire.data(), state);
  st->wire_bytes = bytes;
  ph.compressed();
  std::vector<size_t> sizes(static_cast<size_t>(n), bytes);
  std::vector<std::byte> all;
  if (c.method() == Method::kThreshold) {
    // Sizes differ per rank: learn them, then an allgatherv.
    uint64_t mine = bytes;
    std::vector<uint64_t> each(static_cast<size_t>(n));
    wait(comm.allgather(&mine, each.data(), 1, DataType::kI64));
    for (int r = 0; r < n; ++r) sizes[static_cast<size_t>(r)] = each[static_cast<size_t>(r)];
    size_t total = 0;
    for (size_t b : sizes) total += b;
    all.resize(total);
    wait(comm.allgatherv(wire.data(), all.data(), sizes, DataType::kU8));
    st->path = "allgatherv";
  } else {
    all.resize(bytes * static_cast<size_t>(n));
    wait(comm.allgather(wire.data(), all.data(), bytes, DataType::kU8));
    st->path = "allgather";
  }
  ph.communicated();
  std::fill(data, data + count, 0.0f);
  size_t at = 0;
  for (int r = 0; r < n; ++r) {
    c.decompress(all.data() + at, sizes[static_cast<size_t>(r)], data, count, true);
    at += sizes[static_cast<size_t>(r)];
  }
}

}  // namespace

AllreduceStats allreduce(Communicator& comm, float* data, size_t count, const Compressor& c,
                         State* state, bool average) {
  if (!data && count > 0)
    throw invalid_usage("null buffer", {.rank = comm.rank(), .op = detail::op_name(c.method(), "allreduce")});
  AllreduceStats st;
  Phases ph(&st);
  switch (c.method()) {
    case Method::kFp16:
    case Method::kBf16: cast_path(comm, data, count, c, state, &st, ph); break;
    case Method::kInt8: int8_path(comm, data, count, c, state, &st, ph); break;
    case Method::kRandomK: random_k_path(comm, data, count, c, state, &st, ph); break;
    case Method::kPowerSgd: power_sgd_path(comm, data, count, c, state, average, &st, ph); break;
    default: gather_path(comm, data, count, c, state, &st, ph); break;
  }
  if (c.method() != Method::kPowerSgd) finish(data, count, average, comm.size());
  ph.decompressed();
  return st;
}

}  // namespace plait::compress
