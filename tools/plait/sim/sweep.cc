// `plait sim sweep OP --topology SPEC [--topology SPEC ...] --ranks N[,N...] --bytes B[,B...]
// [--ranks-per-host M] [--tune FILE] [--json FILE]`: every algorithm of OP at every point,
// one row per (topology, ranks, bytes) with the fastest algorithm and the cost model's choice
// beside it. Where they differ, the model is wrong about this network: the row says by how
// much its choice is slower.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/config.h"
#include "plait/commands.h"
#include "plait/error.h"
#include "plait/sim/plot.h"
#include "plait/sim/replay.h"
#include "sim/topology_spec.h"

namespace plait::cli {
namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int sim_sweep_main(const std::vector<std::string>& args) {
  if (args.empty()) throw invalid_usage("sim sweep needs an operation");
  std::vector<std::string> topologies, ranks, bytes;
  std::string per_host = "1";  // checked with each point's options
  SimRunOptions base;
  base.op = args[0];
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 == args.size()) throw invalid_usage(a + " needs a value");
      return args[++i];
    };
    if (a == "--topology") topologies.push_back(value());
    else if (a == "--ranks") ranks = split(value());
    else if (a == "--bytes") bytes = split(value());
    else if (a == "--ranks-per-host") per_host = value();
    else if (a == "--tune") base.tune_file = value();
    else if (a == "--chunk") base.chunk_bytes = parse_bytes(value());
    else if (a == "--json") base.json = value();
    else if (a == "--plot") base.plot = value();
    else throw invalid_usage("sim sweep: unknown option '" + a + "'");
  }
  if (topologies.empty() || ranks.empty() || bytes.empty())
    throw invalid_usage("sim sweep needs --topology, --ranks and --bytes");
  const std::vector<std::string> names = sim_algorithms(base.op);
  const std::string json_path =
      !base.json.empty() ? base.json : base.plot.empty() ? "" : sim_temp_file();
  std::ofstream json;
  if (!json_path.empty()) {
    json.open(json_path);
    if (!json) throw Error(ErrorCategory::kSystem, "cannot write " + json_path);
  }
  std::printf("# plait sim sweep %s: busbw GB/s per algorithm, the fastest, and the cost model's "
              "choice\n", base.op.c_str());
  int disagreements = 0, points = 0;
  double total_seconds = 0;  // the replays' wall time, all points
  for (const std::string& topology : topologies) {
    for (const std::string& r : ranks) {
      for (const std::string& b : bytes) {
        std::vector<std::string> argv = {base.op, "--topology", topology, "--ranks", r,
                                         "--bytes", b, "--ranks-per-host", per_host,
                                         "--chunk", std::to_string(base.chunk_bytes)};
        if (!base.tune_file.empty()) argv.insert(argv.end(), {"--tune", base.tune_file});
        const SimRunOptions o = parse_sim_run_args(argv);
        std::vector<SimRow> rows;
        try {
          rows = simulate(o);
        } catch (const Error& e) {  // a point that cannot be (more ranks than hosts hold)
          std::printf("# skipped %s, %s ranks, %s: %s\n", topology.c_str(), r.c_str(), b.c_str(),
                      e.message().c_str());
          continue;
        }
        for (const SimRow& row : rows)
          if (!row.skipped.empty())
            std::printf("# %s not replayed on %s, %s ranks, %s: %s\n", row.algo.c_str(),
                        topology.c_str(), r.c_str(), b.c_str(), row.skipped.c_str());
        std::erase_if(rows, [](const SimRow& row) { return !row.skipped.empty(); });
        if (rows.empty()) continue;
        if (points == 0) {
          std::printf("%-36s %6s %10s", "topology", "ranks", "bytes");
          for (const std::string& name : names) std::printf(" %18.18s", name.c_str());
          std::printf(" %8s  %-18s %-18s %s\n", "sim(s)", "fastest", "cost model", "verdict");
        }
        ++points;
        size_t fastest = 0, model = rows.size();
        for (size_t i = 0; i < rows.size(); ++i) {
          if (rows[i].result.time_s < rows[fastest].result.time_s) fastest = i;
          if (rows[i].model_choice) model = i;
        }
        std::printf("%-36.36s %6s %10zu", topology.c_str(), r.c_str(), o.bytes);
        for (const std::string& name : names) {
          const SimRow* row = nullptr;
          for (const SimRow& candidate : rows)
            if (candidate.algo == name) row = &candidate;
          if (row) std::printf(" %18.3f", row->busbw_gbps);
          else std::printf(" %18s", "-");  // does not apply to this shape
        }
        std::string verdict = "agree";
        if (model == rows.size()) {
          verdict = "no model choice";
        } else if (model != fastest) {
          // Within 10 % is as good as the model can be asked to be: the replay's own noise
          // (hashed paths, FIFO order) moves close algorithms by that much.
          const double slower = (rows[model].result.time_s / rows[fastest].result.time_s - 1) * 100;
          char buf[96];
          std::snprintf(buf, sizeof buf, slower > 10 ? "MODEL WRONG: its pick is %.0f%% slower" : "close: its pick is %.0f%% slower", slower);
          verdict = buf;
          if (slower > 10) ++disagreements;
        }
        double sim_seconds = 0;
        for (const SimRow& row : rows) sim_seconds += row.sim_seconds;
        total_seconds += sim_seconds;
        std::printf(" %8.1f  %-18s %-18s %s\n", sim_seconds, rows[fastest].algo.c_str(),
                    model < rows.size() ? rows[model].algo.c_str() : "-", verdict.c_str());
        std::fflush(stdout);  // a long sweep shows its points as they come
        if (json) {
          for (const SimRow& row : rows) {
            char line[512];
            std::snprintf(line, sizeof line,
                          "{\"op\": \"%s\", \"algo\": \"%s\", \"topology\": \"%s\", \"ranks\": %s, "
                          "\"ranks_per_host\": %d, \"bytes\": %zu, \"time_us\": %.6g, "
                          "\"busbw_GBps\": %.6g, \"fastest\": %s, \"cost_model_choice\": %s, "
                          "\"method\": \"%s\", \"sim_s\": %.3f}\n",
                          base.op.c_str(), row.algo.c_str(), topology.c_str(), r.c_str(),
                          o.ranks_per_host, row.bytes, row.result.time_s * 1e6, row.busbw_gbps,
                          &row == &rows[fastest] ? "true" : "false",
                          row.model_choice ? "true" : "false", row.result.method.c_str(),
                          row.sim_seconds);
            json << line;
          }
        }
      }
    }
  }
  std::printf("# %d points, the cost model's pick within 10 %% of the fastest in %d; %.1f s of simulation\n",
              points, points - disagreements, total_seconds);
  if (!base.plot.empty()) {
    json.close();
    plot_sim_records(SimPlotKind::kSweep, json_path, base.json.empty(), base.plot,
                     "plait sim sweep " + base.op);
    std::printf("plot: %s\n", base.plot.c_str());
  }
  return 0;
}

}  // namespace plait::cli
