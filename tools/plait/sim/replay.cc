// `plait sim <op>`: one collective replayed on a modelled network, for one algorithm or every
// one that applies, with the cost model's own choice marked beside the fastest.
#include "plait/sim/replay.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>

#include "coll/select/algorithms.h"
#include "sim/contention.h"
#include "coll/select/select.h"
#include "core/config.h"
#include "plait/bench/ops.h"
#include "plait/error.h"
#include "plait/sim/plot.h"
#include "sim/topology_spec.h"
#include "transport/tuned_costs.h"

namespace plait::cli {
namespace {

const std::map<std::string_view, coll::CollOp> kOps = {
    {"allreduce", coll::CollOp::kAllreduce},   {"reduce", coll::CollOp::kReduce},
    {"broadcast", coll::CollOp::kBroadcast},   {"allgather", coll::CollOp::kAllgather},
    {"reduce_scatter", coll::CollOp::kReduceScatter}, {"alltoall", coll::CollOp::kAlltoall},
    {"gather", coll::CollOp::kGather},         {"scatter", coll::CollOp::kScatter}};

int to_int(const std::string& option, const std::string& text, int min) {
  try {
    size_t used = 0;
    const int v = std::stoi(text, &used);
    if (used == text.size() && v >= min) return v;
  } catch (const std::exception&) {
  }
  throw invalid_usage(option + " takes an integer >= " + std::to_string(min) + ", not '" + text +
                      "'");
}

}  // namespace

// The links' rates and latencies are the topology's.
sim::SimParams params_from(const std::string& tune_file) {
  sim::SimParams p;
  if (tune_file.empty()) return p;
  const transport::TunedCosts t = transport::load_tuned_costs_file(tune_file);
  if (!t.found) throw invalid_usage("--tune: no file " + tune_file);
  auto us = [&](std::string_view scope, std::string_view field, double* out, double scale) {
    if (auto v = t.get(scope, field)) *out = *v * scale;
  };
  us("tcp", "alpha_us", &p.alpha_s, 1e-6);
  us("ucx", "alpha_us", &p.alpha_s, 1e-6);
  us("shm", "alpha_us", &p.intra_alpha_s, 1e-6);
  us("shm", "beta_bytes_per_us", &p.intra_bytes_per_s, 1e6);
  us("host", "gamma_bytes_per_us", &p.gamma_bytes_per_s, 1e6);
  us("host", "copy_bytes_per_us", &p.copy_bytes_per_s, 1e6);
  return p;
}

std::string sim_temp_file() {
  char path[] = "/tmp/plait-sim-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) throw Error(ErrorCategory::kSystem, "cannot make a file in /tmp");
  ::close(fd);
  return path;
}

std::vector<std::string> sim_algorithms(const std::string& op) {
  auto it = kOps.find(op);
  if (it == kOps.end()) throw invalid_usage("sim: no operation '" + op + "'");
  std::vector<std::string> out;
  for (coll::Algorithm a : coll::algorithms_for(it->second))
    if (a != coll::Algorithm::kShm) out.emplace_back(coll::to_string(a));
  return out;
}

SimRunOptions parse_sim_run_args(const std::vector<std::string>& args) {
  SimRunOptions o;
  if (args.empty()) throw invalid_usage("plait sim needs an operation or 'topo'");
  o.op = args[0];
  if (!kOps.count(o.op)) throw invalid_usage("sim: no operation '" + o.op + "'");
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 == args.size()) throw invalid_usage(a + " needs a value");
      return args[++i];
    };
    if (a == "--topology") o.topology = value();
    else if (a == "--ranks") o.ranks = to_int(a, value(), 1);
    else if (a == "--ranks-per-host") o.ranks_per_host = to_int(a, value(), 1);
    else if (a == "--algo") o.algo = value();
    else if (a == "--bytes") o.bytes = parse_bytes(value());
    else if (a == "--chunk") o.chunk_bytes = parse_bytes(value());
    else if (a == "--tune") o.tune_file = value();
    else if (a == "--json") o.json = value();
    else if (a == "--plot") o.plot = value();
    else if (a == "--replay") {
      const std::string mode = value();
      if (mode == "auto") o.replay = sim::ReplayMode::kAuto;
      else if (mode == "full") o.replay = sim::ReplayMode::kFull;
      else if (mode == "symmetric") o.replay = sim::ReplayMode::kSymmetric;
      else throw invalid_usage("--replay takes auto, full or symmetric, not '" + mode + "'");
    }
    else throw invalid_usage("sim: unknown option '" + a + "'");
  }
  if (o.topology.empty()) throw invalid_usage("sim: --topology SPEC is required");
  if (o.ranks == 0) throw invalid_usage("sim: --ranks N is required");
  if (o.bytes == 0) throw invalid_usage("sim: --bytes B is required (K, M, G suffixes)");
  return o;
}

namespace {

// The call as a communicator of o.ranks ranks, placed in blocks of o.ranks_per_host, makes it.
coll::CollArgs model_call(const SimRunOptions& o) {
  const OpSpec& spec = op_spec(*parse_bench_op(o.op));
  coll::CollArgs args;
  args.op = kOps.at(o.op);
  args.dtype = DataType::kF32;
  args.count = count_for_bytes(spec, o.bytes, o.ranks, args.dtype);
  args.chunk_count = std::max<size_t>(1, o.chunk_bytes / dtype_size(args.dtype));
  args.size = o.ranks;
  const sim::Placement placement{.ranks = o.ranks, .ranks_per_host = o.ranks_per_host};
  if (o.ranks > o.ranks_per_host)
    for (int r = 0; r < o.ranks; ++r) args.host_of.push_back(placement.host_of(r));
  return args;
}

}  // namespace

ModelPick cost_model_pick(const SimRunOptions& o) {
  const auto topology = sim::parse_topology(o.topology);
  const coll::CollArgs args = model_call(o);
  const int hosts = (o.ranks + o.ranks_per_host - 1) / o.ranks_per_host;
  ModelPick pick;
  try {
    const coll::Selection s =
        coll::select_algorithm(args, "", Config{}, sim::model_params(params_from(o.tune_file), *topology, hosts, o.ranks_per_host));
    pick.algo = std::string(coll::to_string(s.info->algorithm));
    pick.reason = s.reason;
  } catch (const Error& e) {
    pick.reason = e.message();
  }
  return pick;
}

std::vector<SimRow> simulate(const SimRunOptions& o) {
  const coll::CollOp op = kOps.at(o.op);
  const auto topology = sim::parse_topology(o.topology);
  const sim::SimParams params = params_from(o.tune_file);
  const OpSpec& spec = op_spec(*parse_bench_op(o.op));
  // replay() sets each rank's size and hosts itself; `applies` reads them here.
  const coll::CollArgs args = model_call(o);
  const sim::Placement placement{.ranks = o.ranks, .ranks_per_host = o.ranks_per_host};

  std::vector<coll::Algorithm> algos;
  if (o.algo == "all") {
    for (coll::Algorithm a : coll::algorithms_for(op))
      if (a != coll::Algorithm::kShm) algos.push_back(a);
  } else {
    coll::Algorithm a;
    if (!coll::parse_algorithm(o.algo, &a))
      throw invalid_usage("sim: no algorithm '" + o.algo + "'");
    algos.push_back(a);
  }
  const std::string model = cost_model_pick(o).algo;

  std::vector<SimRow> rows;
  for (coll::Algorithm a : algos) {
    const coll::AlgorithmInfo* info = coll::find_algorithm(op, a);
    if (o.algo == "all" && info && info->applies && !info->applies(args)) continue;
    SimRow row;
    row.algo = std::string(coll::to_string(a));
    const auto started = std::chrono::steady_clock::now();
    if (o.algo == "all") {
      try {
        row.result = sim::replay(*topology, placement, args, a, params, o.replay);
      } catch (const Error& e) {  // the others may still be replayed at this scale
        row.skipped = e.message();
        rows.push_back(std::move(row));
        continue;
      }
    } else {
      row.result = sim::replay(*topology, placement, args, a, params, o.replay);
    }
    row.sim_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    row.bytes = bytes_for_count(spec, args.count, o.ranks, args.dtype);
    const double algbw = row.result.time_s > 0 ? row.bytes / row.result.time_s / 1e9 : 0;
    row.busbw_gbps = algbw * spec.busbw_factor(o.ranks);
    row.model_choice = row.algo == model;
    rows.push_back(std::move(row));
  }
  return rows;
}

int sim_run_main(const std::vector<std::string>& args) {
  const SimRunOptions o = parse_sim_run_args(args);
  const ModelPick pick = cost_model_pick(o);
  if (o.algo == "none") {  // the model's choice alone, nothing replayed
    std::printf("cost model: %s (%s)\n", pick.algo.empty() ? "-" : pick.algo.c_str(), pick.reason.c_str());
    return 0;
  }
  std::vector<SimRow> rows = simulate(o);
  const auto topology = sim::parse_topology(o.topology);
  for (const SimRow& r : rows)
    if (!r.skipped.empty()) std::printf("# %s not replayed: %s\n", r.algo.c_str(), r.skipped.c_str());
  std::erase_if(rows, [](const SimRow& r) { return !r.skipped.empty(); });
  if (rows.empty()) throw invalid_usage("sim: no algorithm of " + o.op + " could be replayed here");
  size_t fastest = 0;
  for (size_t i = 1; i < rows.size(); ++i)
    if (rows[i].result.time_s < rows[fastest].result.time_s) fastest = i;
  std::printf("# plait sim %s on %s: %d ranks, %d per host, %zu bytes\n", o.op.c_str(),
              topology->spec().c_str(), o.ranks, o.ranks_per_host, o.bytes);
  std::printf("# %s\n", pick.reason.c_str());
  std::printf("%-18s %12s %10s %10s %9s  %-24s %s\n", "algorithm", "time(us)", "busbw(GB/s)",
              "messages", "net(MB)", "bottleneck link (busy)", "");
  // A plot draws the records: kept where --json says, else in a file of our own.
  const std::string json_path = !o.json.empty() ? o.json : o.plot.empty() ? "" : sim_temp_file();
  std::ofstream json;
  if (!json_path.empty()) {
    json.open(json_path);
    if (!json) throw Error(ErrorCategory::kSystem, "cannot write " + json_path);
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const SimRow& r = rows[i];
    std::string link = "-";
    if (r.result.bottleneck_link >= 0) {
      const sim::Link& l = topology->links()[r.result.bottleneck_link];
      char buf[64];
      std::snprintf(buf, sizeof buf, "%d->%d (%.0f%%)", l.from, l.to, r.result.bottleneck_busy * 100);
      link = buf;
    }
    std::string marks;
    if (i == fastest && rows.size() > 1) marks += "fastest ";
    if (r.model_choice) marks += "cost-model ";
    if (r.result.method != "full") marks += "[" + r.result.method + "]";
    std::printf("%-18s %12.1f %10.3f %10zu %9.1f  %-24s %s\n", r.algo.c_str(), r.result.time_s * 1e6,
                r.busbw_gbps, r.result.messages, r.result.network_bytes / 1e6, link.c_str(),
                marks.c_str());
    if (json) {
      char line[640];
      std::snprintf(line, sizeof line,
                    "{\"op\": \"%s\", \"algo\": \"%s\", \"ranks\": %d, \"ranks_per_host\": %d, "
                    "\"bytes\": %zu, \"time_us\": %.6g, \"busbw_GBps\": %.6g, \"topology\": \"%s\", "
                    "\"bottleneck_link\": %d, \"bottleneck_busy\": %.4g, \"cost_model_choice\": %s, "
                    "\"method\": \"%s\"}\n",
                    o.op.c_str(), r.algo.c_str(), o.ranks, o.ranks_per_host, r.bytes,
                    r.result.time_s * 1e6, r.busbw_gbps, topology->spec().c_str(),
                    r.result.bottleneck_link, r.result.bottleneck_busy,
                    r.model_choice ? "true" : "false", r.result.method.c_str());
      json << line;
    }
  }
  if (rows.size() == 1) {
    std::printf("critical path (last step first):\n");
    for (size_t i = 0; i < rows[0].result.critical_path.size() && i < 12; ++i)
      std::printf("  %s\n", rows[0].result.critical_path[i].c_str());
  } else if (!rows.empty() && !rows[fastest].model_choice) {
    std::printf("the cost model would not pick the fastest algorithm here\n");
  }
  if (!o.plot.empty()) {
    json.close();
    const std::string title = o.op + " of " + std::to_string(o.bytes) + " B, " +
                              std::to_string(o.ranks) + " ranks on " + topology->spec();
    plot_sim_records(SimPlotKind::kAlgorithms, json_path, o.json.empty(), o.plot, title);
    std::printf("plot: %s\n", o.plot.c_str());
  }
  return 0;
}

}  // namespace plait::cli
