// `plait bench`: times one operation over a size sweep, nccl-tests style.
//
// Per size: `warmup` untimed calls, then `iters` back-to-back issue+wait calls between two
// clock reads; each rank's time per call is elapsed/iters and the row shows the slowest
// rank's (an allreduce max), because a collective is done only when its last rank is.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "coll/select/algorithms.h"
#include "core/clock.h"
#include "core/config.h"
#include "plait/bench/compress.h"
#include "plait/bench/ops.h"
#include "plait/bench/options.h"
#include "plait/bench/moe.h"
#include "plait/bench/ps.h"
#include "plait/bench/rdma.h"
#include "plait/bench/report.h"
#include "plait/bootstrap.h"
#include "plait/commands.h"
#include "plait/communicator.h"
#include "plait/error.h"

namespace plait::cli {
namespace {

// Page-aligned, so a provider that registers memory never straddles a foreign page.
using Buffer = std::unique_ptr<void, decltype(&std::free)>;
constexpr size_t kBufferAlign = 4096;

Buffer allocate(size_t bytes) {
  if (bytes == 0) return Buffer(nullptr, &std::free);
  const size_t rounded = (bytes + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
  void* p = std::aligned_alloc(kBufferAlign, rounded);
  if (p == nullptr) throw system_error("allocating " + std::to_string(bytes) + " bytes", ENOMEM);
  std::memset(p, 0, rounded);  // touch every page now, not inside the timed loop
  return Buffer(p, &std::free);
}

double agree_max(Communicator& comm, double value) {
  comm.allreduce(&value, &value, 1, DataType::kF64, ReduceOp::kMax)->wait();
  return value;
}

double sum_over_ranks(Communicator& comm, double value) {
  comm.allreduce(&value, &value, 1, DataType::kF64, ReduceOp::kSum)->wait();
  return value;
}

int64_t agree_sum(Communicator& comm, int64_t value) {
  comm.allreduce(&value, &value, 1, DataType::kI64, ReduceOp::kSum)->wait();
  return value;
}

// The buffers of one size. In place there is one buffer and `in` points into it.
struct SizeBuffers {
  Buffer in{nullptr, &std::free};
  Buffer out{nullptr, &std::free};
  OpBuffers view;
  size_t out_bytes = 0;
};

SizeBuffers allocate_buffers(const OpSpec& spec, const OpShape& shape) {
  const size_t elem = dtype_size(shape.dtype);
  SizeBuffers b;
  if (shape.in_place) {
    const size_t offset = spec.in_place_offset(shape);
    const size_t elems = std::max(offset + spec.input_count(shape), spec.output_count(shape));
    b.out_bytes = elems * elem;
    b.out = allocate(b.out_bytes);
    b.view.out = b.out.get();
    b.view.in = b.out ? static_cast<char*>(b.out.get()) + offset * elem : nullptr;
  } else {
    b.in = allocate(spec.input_count(shape) * elem);
    b.out_bytes = spec.output_count(shape) * elem;
    b.out = allocate(b.out_bytes);
    b.view = {b.in.get(), b.out.get()};
  }
  return b;
}

// Seconds one call takes on this rank, to size the timed loop: measured on the warmup calls
// after the first (which pays for connection setup), or on one extra call without warmup.
double time_warmup(Communicator& comm, const OpSpec& spec, const OpShape& shape,
                   const OpBuffers& buffers, const CallOptions& call, int warmup) {
  if (warmup > 0) spec.issue(comm, shape, buffers, call).wait();
  const int timed = std::max(1, warmup - 1);
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < timed; ++i) spec.issue(comm, shape, buffers, call).wait();
  return seconds_since(start) / timed;
}

BenchRecord measure(Communicator& comm, const BenchOptions& options, const OpShape& shape) {
  const OpSpec& spec = op_spec(options.op);
  SizeBuffers buffers = allocate_buffers(spec, shape);
  fill_input(spec, shape, buffers.view.in);  // finite inputs: no NaN/denormal slow paths
  CallOptions call;
  call.algorithm = options.algo;

  int iters = options.iters;
  if (iters > 0) {
    for (int i = 0; i < options.warmup; ++i) spec.issue(comm, shape, buffers.view, call).wait();
  } else {
    // Every rank must run the same number of calls: agree on the slowest estimate.
    const double estimate = time_warmup(comm, spec, shape, buffers.view, call, options.warmup);
    iters = calibrated_iters(agree_max(comm, estimate));
  }

  comm.barrier()->wait();  // start the clocks together
  const double cpu_start = process_cpu_seconds();
  const Clock::time_point start = Clock::now();
  std::string ran;  // the algorithm the communicator picked (sendrecv/barrier: per op)
  // Back to back: when each call ended, in seconds since start. With --sync: how long each
  // call took from the barrier before it (the barrier's own time is not counted).
  std::vector<double> times(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    Clock::time_point call_start = start;
    if (options.sync) {
      comm.barrier()->wait();
      call_start = Clock::now();
    }
    Pending pending = spec.issue(comm, shape, buffers.view, call);
    pending.wait();
    times[static_cast<size_t>(i)] = seconds_since(call_start);
    if (i == 0 && pending.first) ran = pending.first->algorithm();
  }
  const double cpu_seconds = (process_cpu_seconds() - cpu_start) / iters;

  BenchRecord record;
  record.op = std::string(spec.name);
  record.algo = !ran.empty() ? ran : options.algo.empty() ? "auto" : options.algo;
  record.dtype = spec.op == BenchOp::kBarrier ? "none" : std::string(to_string(shape.dtype));
  record.redop = spec.reduces ? std::string(to_string(shape.redop)) : "none";
  record.root = spec.rooted ? shape.root : -1;
  record.count = shape.count;
  record.bytes = bytes_for_count(spec, shape.count, shape.size, shape.dtype);
  record.ranks = shape.size;
  record.iters = iters;
  record.in_place = shape.in_place;
  // Back to back, a call lasts from the end of the one before on the last rank to finish it
  // to its own end on the last rank (not the slowest rank's interval per call: ranks that
  // finish in turn would make every call look as slow as the slowest rank's worst one), so
  // the calls add up to the slowest rank's loop. With --sync, a call lasts as long as it did
  // on its slowest rank. time_us is the calls' mean either way.
  comm.allreduce(times.data(), times.data(), times.size(), DataType::kF64, ReduceOp::kMax)->wait();
  std::vector<double> call_seconds(times.size());
  double total = 0;
  for (size_t i = 0; i < times.size(); ++i) {
    call_seconds[i] = options.sync ? times[i] : times[i] - (i > 0 ? times[i - 1] : 0);
    total += call_seconds[i];
  }
  record.time_us = total / iters * 1e6;
  fill_call_times(record, std::move(call_seconds));
  record.cpu_us_per_op = sum_over_ranks(comm, cpu_seconds) * 1e6;
  fill_bandwidth(record, spec.busbw_factor(shape.size));

  if (options.check) {
    // 0xff bytes are NaN in every float type and -1/255 in the integer ones: an element the
    // operation forgot to write cannot pass for the small non-negative expected values.
    if (buffers.out) std::memset(buffers.out.get(), 0xff, buffers.out_bytes);
    fill_input(spec, shape, buffers.view.in);
    spec.issue(comm, shape, buffers.view, call).wait();
    record.wrong = agree_sum(comm, count_wrong(spec, shape, buffers.view.out));
  }
  return record;
}

// An --algo the op does not have is a usage error worth catching before any rank starts;
// whether it applies to a particular size is still the communicator's call (it throws).
void check_algorithm_exists(const BenchOptions& options) {
  coll::Algorithm algorithm = coll::Algorithm::kAuto;
  if (!coll::parse_algorithm(options.algo, &algorithm) || algorithm == coll::Algorithm::kAuto)
    return;
  static constexpr struct { BenchOp bench; coll::CollOp coll; } kCollOps[] = {
      {BenchOp::kAllreduce, coll::CollOp::kAllreduce},
      {BenchOp::kReduce, coll::CollOp::kReduce},
      {BenchOp::kBroadcast, coll::CollOp::kBroadcast},
      {BenchOp::kAllgather, coll::CollOp::kAllgather},
      {BenchOp::kReduceScatter, coll::CollOp::kReduceScatter},
      {BenchOp::kAlltoall, coll::CollOp::kAlltoall},
      {BenchOp::kGather, coll::CollOp::kGather},
      {BenchOp::kScatter, coll::CollOp::kScatter},
      {BenchOp::kBarrier, coll::CollOp::kBarrier},
  };
  for (const auto& entry : kCollOps) {
    if (entry.bench != options.op) continue;
    if (coll::find_algorithm(entry.coll, algorithm) != nullptr) return;
    std::string names;
    for (coll::Algorithm a : coll::algorithms_for(entry.coll)) {
      names += ' ';
      names += to_string(a);
    }
    throw invalid_usage("--algo " + options.algo + " does not apply to " +
                        std::string(to_string(options.op)) + "; it has: auto" + names);
  }
}

// Only rank 0 writes the file, but every rank must learn that it could not, or the others
// would wait for a rank 0 that already left.
std::FILE* open_json(Communicator& comm, const std::string& path) {
  if (path.empty()) return nullptr;
  std::FILE* file = nullptr;
  int err = 0;
  if (comm.rank() == 0) {
    file = std::fopen(path.c_str(), "w");
    if (file == nullptr) err = errno;
  }
  if (agree_sum(comm, err != 0 ? 1 : 0) == 0) return file;
  if (comm.rank() == 0) throw system_error("--json: cannot write '" + path + "'", err);
  throw remote_error("--json: rank 0 cannot write '" + path + "'");
}

std::string iters_text(const BenchOptions& options) {
  if (options.iters > 0) return std::to_string(options.iters);
  return "calibrated (~" + std::to_string(static_cast<int>(kCalibratedSeconds * 1000)) +
         " ms per size, >= " + std::to_string(kMinCalibratedIters) + ")";
}

int run_bench(const BenchOptions& options) {
  const Config config = Config::from_env();
  Bootstrap bootstrap = bootstrap_from_env(config.connect_timeout);
  std::shared_ptr<Communicator> comm = Communicator::create(bootstrap);
  const OpSpec& spec = op_spec(options.op);
  const int rank = comm->rank();
  const int size = comm->size();
  // The providers do not connect a rank to itself, and a ring of one has no neighbour.
  if ((spec.op == BenchOp::kSendrecv || spec.op == BenchOp::kPingpong) && size < 2)
    throw invalid_usage(std::string(spec.name) + " needs at least 2 ranks (plait bench -n 2 " +
                        std::string(spec.name) + " ...)");
  if (spec.rooted && options.root >= size)
    throw invalid_usage("--root " + std::to_string(options.root) + " is not a rank of this " +
                        std::to_string(size) + "-rank job");

  std::unique_ptr<std::FILE, decltype(&std::fclose)> json(open_json(*comm, options.json_path),
                                                          &std::fclose);
  if (rank == 0) {
    const std::string dtype =
        spec.op == BenchOp::kBarrier ? "none" : std::string(to_string(options.dtype));
    std::fputs(format_header(std::string(spec.name), size, dtype,
                             spec.reduces ? std::string(to_string(options.redop)) : "none",
                             options.algo, iters_text(options), options.warmup, options.check,
                             options.in_place, options.sync)
                   .c_str(),
               stdout);
    std::fputs(format_settings(Config::from_env()).c_str(), stdout);
    std::fputs(format_table_header().c_str(), stdout);
    std::fflush(stdout);
  }

  const std::vector<size_t> sizes = spec.op == BenchOp::kBarrier
                                        ? std::vector<size_t>{0}
                                        : size_sweep(options.min_bytes, options.max_bytes,
                                                     options.factor);
  std::vector<BenchRecord> records;
  int64_t wrong = 0;
  size_t last_count = 0;
  for (size_t bytes : sizes) {
    const size_t count = count_for_bytes(spec, bytes, size, options.dtype);
    // Sizes too small for one element per rank, or that round to the previous row's count,
    // would only repeat a row.
    if (spec.op != BenchOp::kBarrier && (count == 0 || count == last_count)) continue;
    last_count = count;
    const OpShape shape{rank, size, options.root, count, options.dtype, options.redop,
                        options.in_place};
    BenchRecord record = measure(*comm, options, shape);
    wrong += record.wrong.value_or(0);
    if (rank == 0) {
      std::fputs(format_table_row(record).c_str(), stdout);
      std::fflush(stdout);
      if (json) {
        std::fprintf(json.get(), "%s\n", format_json_line(record).c_str());
        std::fflush(json.get());
      }
    }
    records.push_back(std::move(record));
  }
  if (rank == 0) {
    std::fputs(format_average(records).c_str(), stdout);
    if (options.check) std::printf("# Wrong elements: %lld\n", static_cast<long long>(wrong));
    std::fflush(stdout);
  }
  return wrong > 0 ? 1 : 0;
}

}  // namespace

int bench_main(int argc, char** argv) {
  // `plait bench [-n N] ps ...` is the parameter server's bench, with options of its own.
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "-n") {
      ++i;
      continue;
    }
    if (args[i] == "ps") {
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
      return ps_bench_main(args);
    }
    if (args[i] == "moe") {
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
      return moe_bench_main(args);
    }
    if (args[i] == "rdma") {
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
      return rdma_bench_main(args);
    }
    if (args[i] == "compress") {
      // One process, one core: no ranks to launch.
      return compress_bench_main(std::vector<std::string>(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end()));
    }
    break;
  }
  BenchOptions options;
  try {
    options = parse_bench_args(std::vector<std::string>(argv, argv + argc));
  } catch (const Error& e) {
    std::fprintf(stderr, "plait bench: %s\n(plait bench --help for usage)\n", e.what());
    return 2;
  }
  if (options.help) {
    std::fputs(bench_usage().c_str(), stdout);
    return 0;
  }
  try {
    check_algorithm_exists(options);
    if (options.nranks > 0) {
      std::vector<std::string> command = {"/proc/self/exe", "bench"};
      command.insert(command.end(), options.forwarded_args.begin(),
                     options.forwarded_args.end());
      return launch_local_job(options.nranks, command);
    }
    return run_bench(options);
  } catch (const Error& e) {
    std::fprintf(stderr, "plait bench: %s\n", e.what());
    return e.category() == ErrorCategory::kInvalidUsage ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plait bench: %s\n", e.what());
    return 1;
  }
}

}  // namespace plait::cli
