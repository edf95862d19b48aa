// `plait bench`'s pure logic: option parsing, the size sweep, nccl-tests' byte counts and
// busbw factors, the --check inputs and references, and the report formats. No job runs.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/reduce.h"
#include "plait/bench/ops.h"
#include "plait/bench/options.h"
#include "plait/bench/ps.h"
#include "plait/bench/rdma.h"
#include "plait/bench/report.h"
#include "plait/error.h"
#include "transport/tcp/tcp_settings.h"

namespace plait::cli {
namespace {

BenchOptions parse(std::vector<std::string> args) { return parse_bench_args(args); }

void expect_usage_error(std::vector<std::string> args, const std::string& fragment) {
  try {
    parse_bench_args(args);
    ADD_FAILURE() << "no error for " << ::testing::PrintToString(args);
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage);
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "'" << e.what() << "' lacks '" << fragment << "'";
  }
}

TEST(BenchOptions, Defaults) {
  BenchOptions o = parse({"allreduce"});
  EXPECT_EQ(o.op, BenchOp::kAllreduce);
  EXPECT_EQ(o.min_bytes, 8u);
  EXPECT_EQ(o.max_bytes, size_t{64} << 20);
  EXPECT_EQ(o.factor, 2.0);
  EXPECT_EQ(o.dtype, DataType::kF32);
  EXPECT_EQ(o.redop, ReduceOp::kSum);
  EXPECT_EQ(o.algo, "auto");
  EXPECT_EQ(o.root, 0);
  EXPECT_EQ(o.iters, 0);
  EXPECT_EQ(o.warmup, 5);
  EXPECT_FALSE(o.check);
  EXPECT_FALSE(o.in_place);
  EXPECT_TRUE(o.json_path.empty());
  EXPECT_EQ(o.nranks, 0);
  EXPECT_EQ(o.forwarded_args, std::vector<std::string>{"allreduce"});
}

TEST(BenchOptions, EveryOption) {
  BenchOptions o = parse({"--min", "4KiB", "--max=16KiB", "--factor", "4", "reduce_scatter",
                          "--dtype", "bf16", "--redop", "max", "--algo", "ring", "--root",
                          "1", "--iters", "7", "--warmup=0", "--check", "--inplace", "--json",
                          "out.json"});
  EXPECT_EQ(o.op, BenchOp::kReduceScatter);
  EXPECT_EQ(o.min_bytes, 4096u);
  EXPECT_EQ(o.max_bytes, 16384u);
  EXPECT_EQ(o.factor, 4.0);
  EXPECT_EQ(o.dtype, DataType::kBF16);
  EXPECT_EQ(o.redop, ReduceOp::kMax);
  EXPECT_EQ(o.algo, "ring");
  EXPECT_EQ(o.root, 1);
  EXPECT_EQ(o.iters, 7);
  EXPECT_EQ(o.warmup, 0);
  EXPECT_TRUE(o.check);
  EXPECT_TRUE(o.in_place);
  EXPECT_EQ(o.json_path, "out.json");
}

TEST(BenchOptions, SizesTakeSuffixes) {
  EXPECT_EQ(parse({"allreduce", "--max", "64M"}).max_bytes, parse_bytes("64M"));
  EXPECT_EQ(parse({"allreduce", "--min", "1KiB", "--max", "1KiB"}).min_bytes, 1024u);
  EXPECT_EQ(parse({"allreduce", "--min", "100"}).min_bytes, 100u);
}

TEST(BenchOptions, LaunchCountIsNotForwarded) {
  BenchOptions o = parse({"-n", "4", "allgather", "--check", "--max", "1K"});
  EXPECT_EQ(o.nranks, 4);
  EXPECT_EQ(o.forwarded_args, (std::vector<std::string>{"allgather", "--check", "--max", "1K"}));
  EXPECT_EQ(parse({"broadcast", "--nranks=3"}).nranks, 3);
}

// The subcommands read their options alike (tools/plait/option_reader.h): "--name=value" or
// "--name value", checked values, and what the ranks of -n N get passed on whole.
TEST(BenchOptions, SubcommandsReadOptionsAlike) {
  const PsBenchOptions ps = parse_ps_bench_args({"--min=4K", "-n", "3", "--servers", "2", "--check"});
  EXPECT_EQ(ps.min_bytes, 4096u);
  EXPECT_EQ(ps.nranks, 3);
  EXPECT_EQ(ps.servers, 2);
  EXPECT_EQ(ps.forwarded_args, (std::vector<std::string>{"--min=4K", "--servers", "2", "--check"}));
  const RdmaBenchOptions rdma = parse_rdma_bench_args({"--max=64K", "--factor", "2.5", "-n", "2"});
  EXPECT_EQ(rdma.max_bytes, size_t{64} << 10);
  EXPECT_EQ(rdma.factor, 2.5);
  EXPECT_EQ(rdma.forwarded_args, (std::vector<std::string>{"--max=64K", "--factor", "2.5"}));
  for (auto parse_sub : {+[](const std::vector<std::string>& a) { parse_ps_bench_args(a); },
                         +[](const std::vector<std::string>& a) { parse_rdma_bench_args(a); }}) {
    try {
      parse_sub({"--iters", "0"});
      ADD_FAILURE() << "--iters 0 accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--iters takes an integer >= 1, not '0'"), std::string::npos) << e.what();
    }
    try {
      parse_sub({"--bogus"});
      ADD_FAILURE() << "--bogus accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("unknown option '--bogus'"), std::string::npos) << e.what();
    }
  }
}

TEST(BenchOptions, Help) {
  EXPECT_TRUE(parse({"--help"}).help);
  EXPECT_TRUE(parse({"allreduce", "-h"}).help);
  EXPECT_NE(bench_usage().find("reduce_scatter"), std::string::npos);
}

TEST(BenchOptions, Errors) {
  expect_usage_error({}, "which operation");
  expect_usage_error({"allreduse"}, "unknown operation 'allreduse'");
  expect_usage_error({"allreduce", "broadcast"}, "one operation only");
  expect_usage_error({"allreduce", "--bogus"}, "unknown option '--bogus'");
  expect_usage_error({"allreduce", "--min"}, "--min needs a value");
  expect_usage_error({"allreduce", "--min", "lots"}, "--min");
  expect_usage_error({"allreduce", "--min", "64", "--max", "8"}, "below --min");
  expect_usage_error({"allreduce", "--factor", "1"}, "--factor");
  expect_usage_error({"allreduce", "--factor", "x"}, "--factor");
  expect_usage_error({"allreduce", "--dtype", "f128"}, "unknown type 'f128'");
  expect_usage_error({"allreduce", "--redop", "xor"}, "unknown operator 'xor'");
  expect_usage_error({"allreduce", "--algo", "butterfly"}, "unknown algorithm 'butterfly'");
  expect_usage_error({"allreduce", "--iters", "0"}, "--iters");
  expect_usage_error({"allreduce", "--iters", "5x"}, "--iters");
  expect_usage_error({"allreduce", "--warmup", "-1"}, "--warmup");
  expect_usage_error({"allreduce", "--root", "-2"}, "--root");
  expect_usage_error({"allreduce", "-n", "0"}, "-n");
  expect_usage_error({"gather", "--inplace"}, "--inplace does not apply to gather");
  expect_usage_error({"alltoall", "--inplace"}, "--inplace does not apply to alltoall");
  expect_usage_error({"sendrecv", "--algo", "ring"}, "--algo does not apply to sendrecv");
}

TEST(BenchSweep, DoublesUpToMaxAndIncludesIt) {
  EXPECT_EQ(size_sweep(8, 64, 2), (std::vector<size_t>{8, 16, 32, 64}));
  EXPECT_EQ(size_sweep(8, 100, 2), (std::vector<size_t>{8, 16, 32, 64, 100}));
  EXPECT_EQ(size_sweep(10, 10, 2), (std::vector<size_t>{10}));
  EXPECT_EQ(size_sweep(1, 4, 1.1), (std::vector<size_t>{1, 2, 3, 4}));
  const std::vector<size_t> full = size_sweep(8, size_t{64} << 20, 2);
  EXPECT_EQ(full.size(), 24u);
  EXPECT_EQ(full.back(), size_t{64} << 20);
}

TEST(BenchSweep, CalibratedIters) {
  EXPECT_EQ(calibrated_iters(1e-3), 200);
  EXPECT_EQ(calibrated_iters(1.0), kMinCalibratedIters);
  EXPECT_EQ(calibrated_iters(1e-9), kMaxCalibratedIters);
  EXPECT_EQ(calibrated_iters(0.0), kMaxCalibratedIters);
}

TEST(BenchOps, NamesRoundTrip) {
  for (BenchOp op : {BenchOp::kAllreduce, BenchOp::kReduce, BenchOp::kBroadcast,
                     BenchOp::kAllgather, BenchOp::kReduceScatter, BenchOp::kAlltoall,
                     BenchOp::kGather, BenchOp::kScatter, BenchOp::kSendrecv, BenchOp::kBarrier}) {
    EXPECT_EQ(parse_bench_op(to_string(op)), op);
    EXPECT_EQ(op_spec(op).op, op);
  }
}

TEST(BenchOps, BusBandwidthFactors) {
  EXPECT_DOUBLE_EQ(op_spec(BenchOp::kAllreduce).busbw_factor(4), 1.5);
  EXPECT_DOUBLE_EQ(op_spec(BenchOp::kAllreduce).busbw_factor(1), 0.0);
  for (BenchOp op : {BenchOp::kAllgather, BenchOp::kReduceScatter, BenchOp::kAlltoall,
                     BenchOp::kGather, BenchOp::kScatter})
    EXPECT_DOUBLE_EQ(op_spec(op).busbw_factor(4), 0.75) << to_string(op);
  for (BenchOp op : {BenchOp::kBroadcast, BenchOp::kReduce, BenchOp::kSendrecv})
    EXPECT_DOUBLE_EQ(op_spec(op).busbw_factor(8), 1.0) << to_string(op);
}

TEST(BenchOps, BytesAndCounts) {
  const OpSpec& allreduce = op_spec(BenchOp::kAllreduce);
  EXPECT_EQ(count_for_bytes(allreduce, 1024, 4, DataType::kF32), 256u);
  EXPECT_EQ(bytes_for_count(allreduce, 256, 4, DataType::kF32), 1024u);
  // Whole-buffer ops: size = ranks * count * elemsize.
  for (BenchOp op : {BenchOp::kAllgather, BenchOp::kReduceScatter, BenchOp::kAlltoall,
                     BenchOp::kGather, BenchOp::kScatter}) {
    EXPECT_EQ(count_for_bytes(op_spec(op), 1024, 4, DataType::kF32), 64u) << to_string(op);
    EXPECT_EQ(bytes_for_count(op_spec(op), 64, 4, DataType::kF32), 1024u) << to_string(op);
  }
  // Rounds down to whole elements per rank.
  EXPECT_EQ(count_for_bytes(op_spec(BenchOp::kAlltoall), 1000, 3, DataType::kF64), 41u);
  EXPECT_EQ(bytes_for_count(op_spec(BenchOp::kAlltoall), 41, 3, DataType::kF64), 984u);
  EXPECT_EQ(count_for_bytes(op_spec(BenchOp::kAllgather), 8, 4, DataType::kF32), 0u);
  EXPECT_EQ(count_for_bytes(op_spec(BenchOp::kSendrecv), 6, 2, DataType::kF16), 3u);
  EXPECT_EQ(count_for_bytes(op_spec(BenchOp::kBarrier), 1024, 2, DataType::kF32), 0u);
  EXPECT_EQ(bytes_for_count(op_spec(BenchOp::kBarrier), 10, 2, DataType::kF32), 0u);
}

TEST(BenchOps, ElementsRoundTripInEveryDtype) {
  for (DataType dtype : kAllDataTypes) {
    std::vector<char> buffer(8 * dtype_size(dtype));
    for (size_t i = 0; i < 8; ++i) store_element(dtype, buffer.data(), i, 100.0 + i);
    for (size_t i = 0; i < 8; ++i)
      EXPECT_EQ(load_element(dtype, buffer.data(), i), 100.0 + i) << to_string(dtype);
  }
}

// Runs `op` the slow obvious way, in the dtype, with the library's reduction kernels, from
// each rank's --check input: what a correct communicator must produce. Returns each rank's
// output buffer.
std::vector<std::vector<char>> simulate(const OpSpec& spec, const OpShape& base) {
  const size_t elem = dtype_size(base.dtype);
  const size_t c = base.count;
  const int n = base.size;
  auto shape_of = [&](int r) {
    OpShape s = base;
    s.rank = r;
    return s;
  };
  std::vector<std::vector<char>> in(n), out(n);
  for (int r = 0; r < n; ++r) {
    in[r].resize(spec.input_count(shape_of(r)) * elem);
    fill_input(spec, shape_of(r), in[r].data());
    out[r].assign(spec.output_count(shape_of(r)) * elem, '\xff');
  }
  auto reduce_blocks = [&](size_t offset, char* dst) {
    std::memcpy(dst, in[0].data() + offset * elem, c * elem);
    for (int r = 1; r < n; ++r)
      reduce_inplace(base.dtype, base.redop, dst, in[r].data() + offset * elem, c);
    if (base.redop == ReduceOp::kAvg) scale_divide(base.dtype, dst, c, n);
  };
  for (int me = 0; me < n; ++me) {
    char* o = out[me].data();
    switch (spec.op) {
      case BenchOp::kAllreduce: reduce_blocks(0, o); break;
      case BenchOp::kReduce:
        if (me == base.root) reduce_blocks(0, o);
        break;
      case BenchOp::kBroadcast: std::memcpy(o, in[base.root].data(), c * elem); break;
      case BenchOp::kAllgather:
      case BenchOp::kGather:
        if (spec.op == BenchOp::kGather && me != base.root) break;
        for (int r = 0; r < n; ++r) std::memcpy(o + r * c * elem, in[r].data(), c * elem);
        break;
      case BenchOp::kReduceScatter: reduce_blocks(me * c, o); break;
      case BenchOp::kAlltoall:
        for (int p = 0; p < n; ++p)
          std::memcpy(o + p * c * elem, in[p].data() + me * c * elem, c * elem);
        break;
      case BenchOp::kScatter:
        std::memcpy(o, in[base.root].data() + me * c * elem, c * elem);
        break;
      case BenchOp::kSendrecv:
        std::memcpy(o, in[(me + n - 1) % n].data(), c * elem);
        break;
      case BenchOp::kBarrier: break;
    }
  }
  return out;
}

// The references agree with a correct execution for every op, dtype, operator and a few
// world sizes: the inputs keep every dtype exact, including f16, bf16, i8 and u8.
TEST(BenchCheck, ReferenceMatchesSimulatedCollectives) {
  for (BenchOp op : {BenchOp::kAllreduce, BenchOp::kReduce, BenchOp::kBroadcast,
                     BenchOp::kAllgather, BenchOp::kReduceScatter, BenchOp::kAlltoall,
                     BenchOp::kGather, BenchOp::kScatter, BenchOp::kSendrecv}) {
    const OpSpec& spec = op_spec(op);
    for (int n : {1, 2, 3, 5, 8}) {
      for (DataType dtype : kAllDataTypes) {
        for (ReduceOp redop : kAllReduceOps) {
          if (!spec.reduces && redop != ReduceOp::kSum) continue;
          OpShape shape{0, n, n - 1, 37, dtype, redop, false};
          std::vector<std::vector<char>> out = simulate(spec, shape);
          for (int r = 0; r < n; ++r) {
            shape.rank = r;
            EXPECT_EQ(count_wrong(spec, shape, out[r].data()), 0)
                << spec.name << " n=" << n << " " << to_string(dtype) << " "
                << to_string(redop) << " rank " << r;
          }
        }
      }
    }
  }
}

TEST(BenchCheck, SumsStayExactForManyRanks) {
  for (int n : {16, 100, 127, 200}) {
    for (ReduceOp redop : kAllReduceOps) {
      OpShape shape{0, n, 0, 64, DataType::kI8, redop, false};
      std::vector<std::vector<char>> out = simulate(op_spec(BenchOp::kAllreduce), shape);
      EXPECT_EQ(count_wrong(op_spec(BenchOp::kAllreduce), shape, out[0].data()), 0)
          << "n=" << n << " " << to_string(redop);
    }
  }
}

TEST(BenchCheck, CountsWrongAndUnwrittenElements) {
  const OpSpec& spec = op_spec(BenchOp::kAllgather);
  OpShape shape{1, 3, 0, 10, DataType::kF16, ReduceOp::kSum, false};
  std::vector<std::vector<char>> out = simulate(spec, shape);
  store_element(shape.dtype, out[1].data(), 4, 1000);
  std::memset(out[1].data() + 20 * 2, 0xff, 2);  // NaN: what an unwritten element holds
  EXPECT_EQ(count_wrong(spec, shape, out[1].data()), 2);
}

TEST(BenchCheck, InPlaceLayout) {
  // allgather in place: the input is this rank's block of the output.
  OpShape shape{2, 4, 0, 5, DataType::kF32, ReduceOp::kSum, true};
  EXPECT_EQ(op_spec(BenchOp::kAllgather).in_place_offset(shape), 10u);
  EXPECT_EQ(op_spec(BenchOp::kReduceScatter).in_place_offset(shape), 0u);
  EXPECT_EQ(op_spec(BenchOp::kReduceScatter).input_count(shape), 20u);
  EXPECT_EQ(op_spec(BenchOp::kReduceScatter).output_count(shape), 5u);
  // Rooted ops leave non-roots' outputs unchecked.
  EXPECT_EQ(op_spec(BenchOp::kReduce).output_count(shape), 0u);
  EXPECT_EQ(op_spec(BenchOp::kGather).output_count(shape), 0u);
  EXPECT_EQ(op_spec(BenchOp::kScatter).input_count(shape), 0u);
}

BenchRecord sample_record() {
  BenchRecord r;
  r.op = "allreduce";
  r.algo = "ring";
  r.dtype = "f32";
  r.redop = "sum";
  r.bytes = 1000000;
  r.count = 250000;
  r.ranks = 4;
  r.iters = 20;
  r.time_us = 1000;
  fill_bandwidth(r, op_spec(BenchOp::kAllreduce).busbw_factor(4));
  return r;
}

TEST(BenchReport, Bandwidth) {
  BenchRecord r = sample_record();
  EXPECT_DOUBLE_EQ(r.algbw_gbps, 1.0);
  EXPECT_DOUBLE_EQ(r.busbw_gbps, 1.5);
  r.time_us = 0;
  fill_bandwidth(r, 1.0);
  EXPECT_EQ(r.algbw_gbps, 0.0);
}

TEST(BenchReport, CallTimesMinMedianMax) {
  BenchRecord r = sample_record();
  fill_call_times(r, {0.003, 0.001, 0.250});  // one call with a retransmission timeout
  EXPECT_DOUBLE_EQ(r.min_us, 1000);
  EXPECT_DOUBLE_EQ(r.median_us, 3000);
  EXPECT_DOUBLE_EQ(r.max_us, 250000);
  fill_call_times(r, {0.004, 0.001, 0.002, 0.003});
  EXPECT_DOUBLE_EQ(r.median_us, 2500);
  fill_call_times(r, {});
  EXPECT_EQ(r.median_us, 0.0);
  EXPECT_EQ(r.max_us, 0.0);
}

TEST(BenchReport, JsonLine) {
  BenchRecord r = sample_record();
  EXPECT_EQ(format_json_line(r),
            "{\"op\":\"allreduce\",\"algo\":\"ring\",\"dtype\":\"f32\",\"redop\":\"sum\","
            "\"root\":-1,\"bytes\":1000000,\"count\":250000,\"ranks\":4,\"iters\":20,"
            "\"inplace\":false,\"time_us\":1000,\"min_us\":0,\"median_us\":0,\"max_us\":0,"
            "\"algbw_GBps\":1,\"busbw_GBps\":1.5,"
            "\"cpu_us_per_op\":0,\"cpu_s_per_GB\":0,\"wrong\":null}");
  r.wrong = 3;
  r.algo = "a\"b";
  const std::string line = format_json_line(r);
  EXPECT_NE(line.find("\"wrong\":3}"), std::string::npos);
  EXPECT_NE(line.find("\"algo\":\"a\\\"b\""), std::string::npos);
}

TEST(BenchReport, CpuSecondsPerGigabyte) {
  BenchRecord r = sample_record();
  r.bytes = 1000000000;  // 1 GB per op
  r.cpu_us_per_op = 250000;  // 0.25 s of CPU per op, all ranks together
  ASSERT_TRUE(r.cpu_s_per_gb().has_value());
  EXPECT_DOUBLE_EQ(*r.cpu_s_per_gb(), 0.25);
  EXPECT_NE(format_json_line(r).find("\"cpu_s_per_GB\":0.25"), std::string::npos);
  r.bytes = 0;  // barrier: no bytes, so no per-GB figure
  EXPECT_FALSE(r.cpu_s_per_gb().has_value());
  EXPECT_NE(format_json_line(r).find("\"cpu_s_per_GB\":null"), std::string::npos);
  EXPECT_NE(format_table_row(r).find("N/A"), std::string::npos);
}

TEST(BenchReport, Table) {
  EXPECT_EQ(format_table_header(),
            "#       size      count   type  redop        algo   root   time(us)  algbw(GB/s)"
            "  busbw(GB/s)  cpu(s/GB)  #wrong\n");
  BenchRecord r = sample_record();
  std::string row = format_table_row(r);
  EXPECT_EQ(row.size(), format_table_header().size()) << row;
  EXPECT_NE(row.find("N/A"), std::string::npos);
  EXPECT_NE(row.find("1000.00"), std::string::npos);
  r.wrong = 0;
  r.cpu_us_per_op = 500;  // 0.5 ms of CPU per op
  EXPECT_EQ(format_table_row(r).find("N/A"), std::string::npos);
  EXPECT_EQ(format_average({r, sample_record()}), "# Avg bus bandwidth: 1.500 GB/s\n");
  EXPECT_EQ(format_average({}), "# Avg bus bandwidth: 0.000 GB/s\n");
  const std::string header =
      format_header("allreduce", 4, "f32", "sum", "auto", "20", 5, true, false, false);
  EXPECT_NE(header.find("ranks 4"), std::string::npos);
  EXPECT_NE(header.find("iters 20"), std::string::npos);
  EXPECT_NE(header.find("calls back to back"), std::string::npos);
  EXPECT_NE(format_header("allreduce", 4, "f32", "sum", "auto", "20", 5, true, false, true)
                .find("a barrier before each call"),
            std::string::npos);
  EXPECT_EQ(format_settings(Config{}), "");
  Config c;
  c.get<transport::TcpSettings>().integrity = true;
  c.transport = "tcp";
  EXPECT_EQ(format_settings(c), "# settings: PLAIT_TRANSPORT=tcp PLAIT_TCP_INTEGRITY=1\n");
}

}  // namespace
}  // namespace plait::cli
