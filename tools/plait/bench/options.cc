#include "plait/bench/options.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "coll/schedule/schedule.h"
#include "core/config.h"
#include "plait/error.h"
#include "plait/option_reader.h"

namespace plait::cli {

BenchOptions parse_bench_args(const std::vector<std::string>& args) {
  BenchOptions o;
  bool have_op = false;
  OptionReader in(args);
  while (in.next()) {
    const std::string& arg = in.arg();
    if (!in.is_option()) {
      if (have_op) throw invalid_usage("one operation only: '" + arg + "' after '" +
                                       std::string(to_string(o.op)) + "'");
      std::optional<BenchOp> op = parse_bench_op(arg);
      if (!op) {
        throw invalid_usage("unknown operation '" + arg + "'; one of: " +
                            std::string(bench_op_names()));
      }
      o.op = *op;
      have_op = true;
      o.forwarded_args.push_back(arg);
      continue;
    }
    const std::string& name = in.name();
    if (name == "-h" || name == "--help") {
      o.help = true;
    } else if (name == "-n" || name == "--nranks") {
      o.nranks = in.integer(1);
      continue;  // the launched ranks run in the job this starts, so -n is not forwarded
    } else if (name == "--min") {
      o.min_bytes = in.bytes();
    } else if (name == "--max") {
      o.max_bytes = in.bytes();
    } else if (name == "--factor") {
      o.factor = in.factor();
    } else if (name == "--dtype") {
      const std::string text = in.value();
      std::optional<DataType> dtype = parse_dtype(text);
      if (!dtype)
        throw invalid_usage("--dtype: unknown type '" + text +
                            "'; one of: f32 f64 f16 bf16 i8 u8 i32 i64");
      o.dtype = *dtype;
    } else if (name == "--redop") {
      const std::string text = in.value();
      std::optional<ReduceOp> redop = parse_reduce_op(text);
      if (!redop)
        throw invalid_usage("--redop: unknown operator '" + text +
                            "'; one of: sum prod min max avg");
      o.redop = *redop;
    } else if (name == "--algo") {
      o.algo = in.value();
      coll::Algorithm algorithm;
      if (!coll::parse_algorithm(o.algo, &algorithm))
        throw invalid_usage("--algo: unknown algorithm '" + o.algo +
                            "'; one of: auto naive ps ring halving_doubling "
                            "recursive_doubling binomial_tree double_binary_tree hierarchical");
    } else if (name == "--root") {
      o.root = in.integer(0);
    } else if (name == "--iters") {
      o.iters = in.integer(1);
    } else if (name == "--warmup") {
      o.warmup = in.integer(0);
    } else if (name == "--check") {
      o.check = true;
    } else if (name == "--inplace" || name == "--in-place") {
      o.in_place = true;
    } else if (name == "--sync") {
      o.sync = true;
    } else if (name == "--json") {
      o.json_path = in.value();
      if (o.json_path.empty()) throw invalid_usage("--json needs a file name");
    } else {
      in.unknown(" (plait bench --help lists them)");
    }
    for (std::string& a : in.taken()) o.forwarded_args.push_back(std::move(a));
  }
  if (o.help) return o;
  if (!have_op)
    throw invalid_usage("which operation? one of: " + std::string(bench_op_names()));
  if (o.min_bytes < 1) throw invalid_usage("--min must be at least 1 byte");
  if (o.max_bytes < o.min_bytes)
    throw invalid_usage("--max (" + std::to_string(o.max_bytes) + ") is below --min (" +
                        std::to_string(o.min_bytes) + ")");
  const OpSpec& spec = op_spec(o.op);
  if (o.in_place && !spec.in_place_ok)
    throw invalid_usage("--inplace does not apply to " + std::string(spec.name));
  if ((o.op == BenchOp::kSendrecv || o.op == BenchOp::kPingpong) && o.algo != "auto" &&
      !o.algo.empty())
    throw invalid_usage("--algo does not apply to " + std::string(to_string(o.op)) +
                        " (point to point)");
  return o;
}

std::vector<size_t> size_sweep(size_t min_bytes, size_t max_bytes, double factor) {
  std::vector<size_t> sizes;
  size_t size = min_bytes;
  while (size < max_bytes) {
    sizes.push_back(size);
    const double next = std::floor(static_cast<double>(size) * factor);
    if (next >= static_cast<double>(max_bytes)) break;
    size = std::max(size + 1, static_cast<size_t>(next));
  }
  sizes.push_back(max_bytes);
  return sizes;
}

int calibrated_iters(double seconds_per_call) {
  if (!(seconds_per_call > 0)) return kMaxCalibratedIters;
  const double iters = std::ceil(kCalibratedSeconds / seconds_per_call);
  if (iters >= kMaxCalibratedIters) return kMaxCalibratedIters;
  return std::max(kMinCalibratedIters, static_cast<int>(iters));
}

std::string bench_usage() {
  return std::string(
             "usage: plait bench [-n N] <op> [options]\n"
             "  op: ") +
         std::string(bench_op_names()) +
         "\n"
         "Runs inside a job (plait run, torchrun, mpirun, srun); -n N starts N local ranks.\n"
         "Also: plait bench rdma (point to point on the transport), plait bench ps (the\n"
         "parameter server), plait bench moe (expert-parallel dispatch and combine),\n"
         "plait bench compress; each with --help.\n"
         "  -n N            launch N ranks on this host\n"
         "  --min BYTES     smallest size (default 8; suffixes K M G, KiB ...)\n"
         "  --max BYTES     largest size (default 64M)\n"
         "  --factor F      size multiplier between rows (default 2)\n"
         "  --dtype T       f32 (default) f64 f16 bf16 i8 u8 i32 i64\n"
         "  --redop OP      sum (default) prod min max avg\n"
         "  --algo NAME     auto (default) naive ps ring halving_doubling recursive_doubling\n"
         "                  binomial_tree double_binary_tree hierarchical\n"
         "  --root R        root of reduce, broadcast, gather, scatter (default 0)\n"
         "  --iters N       timed calls per size (default: as many as fill ~0.2 s, >= 5)\n"
         "  --warmup N      untimed calls per size first (default 5)\n"
         "  --check         verify every element once after timing; exit 1 if any is wrong\n"
         "  --inplace       send and receive in one buffer\n"
         "  --sync          a barrier before each timed call, each timed alone (the slowest\n"
         "                  rank's); default: calls back to back, as a training loop issues them\n"
         "  --json FILE     also write one JSON object per size to FILE\n"
         "Sizes count nccl-tests' way: the whole buffer for allgather, reduce_scatter,\n"
         "alltoall, gather and scatter; busbw uses nccl-tests' factors.\n";
}

}  // namespace plait::cli
