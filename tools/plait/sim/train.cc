#include "plait/sim/train.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/config.h"
#include "plait/error.h"
#include "plait/sim/replay.h"
#include "sim/topology_spec.h"
#include "sim/train/layout.h"
#include "sim/train/timeline_input.h"
#include "sim/train/train_replay.h"

namespace plait::cli {
namespace {

struct TrainOptions {
  std::string layout, timeline, topology, tune, json;
  double intra_rate = 0, reduce_rate = 0;  // bytes/s; 0: the tune file's or the defaults
  int step = -1;
  int ranks = 0;
  int ranks_per_host = 1;
  size_t chunk_bytes = size_t{1} << 20;
  bool sweep = false;
  std::string replay = "auto";
  std::vector<int> tps, pps;           // --sweep's choices (empty: every divisor)
  std::vector<std::string> schedules;  // empty: gpipe, 1f1b, interleaved-1f1b  // auto | full | copies (sim::train::layout_step's tp_copies)
  int path_lines = 12;
  double max_flows_solved = 0;  // 0: SimParams' default
};

int positive(const std::string& option, const std::string& text) {
  try {
    size_t used = 0;
    const int v = std::stoi(text, &used);
    if (used == text.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw invalid_usage("sim train: " + option + " takes a whole number, not '" + text + "'");
}

TrainOptions parse(const std::vector<std::string>& args) {
  TrainOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 == args.size()) throw invalid_usage("sim train: " + a + " needs a value");
      return args[++i];
    };
    if (a == "--layout") o.layout = value();
    else if (a == "--timeline") o.timeline = value();
    else if (a == "--step") o.step = positive(a, value());
    else if (a == "--topology") o.topology = value();
    else if (a == "--ranks") o.ranks = positive(a, value());
    else if (a == "--ranks-per-host") o.ranks_per_host = std::max(1, positive(a, value()));
    else if (a == "--chunk") o.chunk_bytes = parse_bytes(value());
    else if (a == "--tune") o.tune = value();
    else if (a == "--intra-rate") o.intra_rate = sim::parse_rate(value(), "--intra-rate");
    else if (a == "--reduce-rate") o.reduce_rate = sim::parse_rate(value(), "--reduce-rate");
    else if (a == "--json") o.json = value();
    else if (a == "--path") o.path_lines = positive(a, value());
    else if (a == "--max-solved") o.max_flows_solved = std::stod(value());  // tests, experiments
    else if (a == "--sweep") o.sweep = true;
    else if (a == "--tp" || a == "--pp") {
      std::stringstream list(value());
      for (std::string item; std::getline(list, item, ',');)
        (a == "--tp" ? o.tps : o.pps).push_back(std::max(1, positive(a, item)));
    } else if (a == "--schedules") {
      std::stringstream list(value());
      for (std::string item; std::getline(list, item, ',');) o.schedules.push_back(item);
    }
    else if (a == "--replay") {
      o.replay = value();
      if (o.replay != "auto" && o.replay != "full" && o.replay != "copies" && o.replay != "pipeline")
        throw invalid_usage("sim train: --replay takes auto, full, copies or pipeline, not '" +
                            o.replay + "'");
    }
    else throw invalid_usage("sim train: unknown option '" + a + "'");
  }
  if (o.layout.empty() == o.timeline.empty())
    throw invalid_usage("sim train: give --layout FILE or --timeline FILE");
  if (o.topology.empty()) throw invalid_usage("sim train: --topology SPEC is required");
  if (o.sweep && o.layout.empty()) throw invalid_usage("sim train: --sweep varies a --layout");
  return o;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw invalid_usage("sim train: no file " + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// min / median / max of one field over the ranks.
std::string spread(const sim::train::TrainResult& r, double sim::train::RankTime::*field) {
  std::vector<double> v;
  for (const auto& rt : r.ranks) v.push_back(rt.*field * 1e3);
  std::sort(v.begin(), v.end());
  char buf[96];
  std::snprintf(buf, sizeof buf, "%9.2f %9.2f %9.2f", v.front(), v[(v.size() - 1) / 2], v.back());
  return buf;
}

double median_of(const sim::train::TrainResult& r, double sim::train::RankTime::*field) {
  std::vector<double> v;
  for (const auto& rt : r.ranks) v.push_back(rt.*field);
  std::nth_element(v.begin(), v.begin() + (v.size() - 1) / 2, v.end());
  return v[(v.size() - 1) / 2];
}

std::string link_text(const sim::Topology& t, const sim::train::TrainResult& r) {
  if (r.busiest_link < 0) return "none (no byte crossed a host)";
  const sim::Link& l = t.links()[r.busiest_link];
  char buf[128];
  std::snprintf(buf, sizeof buf, "%d->%d (%s %d), busy %.0f %% of the step", l.from, l.to,
                l.from < t.hosts() ? "host" : "switch", l.from, r.busiest_busy * 100);
  return buf;
}

void report(const sim::Topology& t, const sim::train::TrainResult& r, int path_lines) {
  std::printf("step %.3f ms   (%zu tasks and schedule steps, %zu messages, %.1f MB across hosts)\n",
              r.step_s * 1e3, r.nodes, r.messages, r.network_bytes / 1e6);
  std::printf("%-22s %9s %9s %9s\n", "ms, over the ranks:", "min", "median", "max");
  std::printf("%-22s %s\n", "compute", spread(r, &sim::train::RankTime::compute_s).c_str());
  std::printf("%-22s %s\n", "exposed communication", spread(r, &sim::train::RankTime::exposed_s).c_str());
  std::printf("%-22s %s\n", "bubble", spread(r, &sim::train::RankTime::bubble_s).c_str());
  std::printf("%-22s %s\n", "idle at the end", spread(r, &sim::train::RankTime::idle_s).c_str());
  std::printf("busiest link: %s\n", link_text(t, r).c_str());
  std::printf("critical path (%zu segments%s):\n", r.critical_path.size(),
              static_cast<int>(r.critical_path.size()) > path_lines ? ", the last ones" : "");
  const size_t from = r.critical_path.size() > static_cast<size_t>(path_lines)
                          ? r.critical_path.size() - path_lines : 0;
  for (size_t i = from; i < r.critical_path.size(); ++i)
    std::printf("  %s\n", r.critical_path[i].c_str());
}

// --replay copies: each TP group through its first rank; pipeline: one pipeline for all;
// auto: one pipeline above the ranks a full replay of a collective takes (replay.h's
// kMaxFullReplayRanks), through TP groups' first ranks where expert parallelism rules that out.
sim::train::LayoutReplay how(const TrainOptions& o, const sim::train::Layout& l) {
  using sim::train::LayoutReplay;
  if (o.replay == "full") return LayoutReplay::kFull;
  if (o.replay == "copies") return LayoutReplay::kTpCopies;
  if (o.replay == "pipeline") return LayoutReplay::kOnePipeline;
  if (l.ranks() <= sim::kMaxFullReplayRanks) return LayoutReplay::kFull;
  return l.ep > 1 ? LayoutReplay::kTpCopies : LayoutReplay::kOnePipeline;
}

sim::train::StepGraph step_of(const TrainOptions& o, const sim::train::Layout& l) {
  return sim::train::layout_step(l, how(o, l));
}

std::string describe(const sim::train::Layout& l) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "dp %d x tp %d x pp %d%s, %s%s, %d microbatches", l.dp, l.tp,
                l.pp, l.ep > 1 ? (" (ep " + std::to_string(l.ep) + ")").c_str() : "",
                l.schedule.c_str(), l.chunks > 1 ? (" v=" + std::to_string(l.chunks)).c_str() : "",
                l.microbatches());
  return buf;
}

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int k = 1; k <= n; ++k)
    if (n % k == 0) d.push_back(k);
  return d;
}

// One JSON line: the step's shape (a layout's degrees, where it came from one) and times.
std::string record(const sim::Topology& t, int ranks, const sim::train::Layout* l,
                   const sim::train::TrainResult& r, double replay_s) {
  char line[640];
  std::string degrees;
  if (l) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "\"dp\": %d, \"tp\": %d, \"pp\": %d, \"ep\": %d, \"schedule\": \"%s\", "
                  "\"chunks\": %d, \"microbatches\": %d, ",
                  l->dp, l->tp, l->pp, l->ep, l->schedule.c_str(), l->chunks, l->microbatches());
    degrees = buf;
  }
  std::snprintf(line, sizeof line,
                "{\"topology\": \"%s\", \"ranks\": %d, %s\"step_s\": %.6g, \"compute_s\": %.6g, "
                "\"exposed_s\": %.6g, \"bubble_s\": %.6g, \"busiest_busy\": %.4g, "
                "\"replay_s\": %.3g}\n",
                t.spec().c_str(), ranks, degrees.c_str(), r.step_s,
                median_of(r, &sim::train::RankTime::compute_s),
                median_of(r, &sim::train::RankTime::exposed_s),
                median_of(r, &sim::train::RankTime::bubble_s), r.busiest_busy, replay_s);
  return line;
}

void append(const std::string& path, const std::string& line) {
  if (path.empty()) return;
  std::ofstream out(path, std::ios::app);
  if (!out) throw Error(ErrorCategory::kSystem, "sim train: cannot write " + path);
  out << line;
}

int sweep(const TrainOptions& o, const sim::train::Layout& base, const sim::Topology& t,
          const sim::train::DagOptions& dag) {
  const int n = o.ranks > 0 ? o.ranks : base.ranks();
  struct Row {
    sim::train::Layout layout;
    sim::train::TrainResult result;
    double seconds = 0;
  };
  std::vector<Row> rows;
  std::vector<std::string> skipped;
  const std::vector<int> tps = o.tps.empty() ? divisors(std::min(n, o.ranks_per_host)) : o.tps;
  for (int tp : tps)
    for (int pp : o.pps.empty() ? divisors(n / tp) : o.pps) {
      if (n % (tp * pp) != 0) continue;
      const int dp = n / (tp * pp);
      const int ep = dp % base.ep == 0 ? base.ep : 1;
      std::vector<std::pair<std::string, int>> schedules;
      for (const std::string& name : o.schedules.empty()
                                         ? std::vector<std::string>{"gpipe", "1f1b", "interleaved-1f1b"}
                                         : o.schedules)
        if (pp > 1 || name == "1f1b") schedules.emplace_back(name, name == "interleaved-1f1b" ? 2 : 1);
      for (const auto& [schedule, chunks] : schedules) {
        Row row;
        try {
          row.layout = sim::train::with_degrees(base, dp, tp, pp, ep, schedule, chunks);
        } catch (const Error& e) {
          // Not a layout of this job (does not divide, does not fit): said below the table.
          std::string why = e.message();
          if (const size_t at = why.find("layout: "); at != std::string::npos) why = why.substr(at + 8);
          skipped.push_back("dp " + std::to_string(dp) + " x tp " + std::to_string(tp) + " x pp " +
                            std::to_string(pp) + " " + schedule + ": " + why);
          continue;
        }
        const auto started = std::chrono::steady_clock::now();
        sim::train::DagOptions options = dag;
        options.placement.ranks = n;
        try {
          row.result = sim::train::replay_step(t, step_of(o, row.layout), options);
        } catch (const Error& e) {  // past the replay's limits: the others may still be replayed
          skipped.push_back(describe(row.layout) + ": " + e.message());
          continue;
        }
        row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        std::printf("%-52s %10.2f ms  (replayed in %.1f s)\n", describe(row.layout).c_str(),
                    row.result.step_s * 1e3, row.seconds);
        std::fflush(stdout);
        append(o.json, record(t, n, &row.layout, row.result, row.seconds));
        rows.push_back(std::move(row));
      }
    }
  if (rows.empty()) throw invalid_usage("sim train: no layout of " + std::to_string(n) + " ranks fits this job");
  std::sort(rows.begin(), rows.end(),
            [](const Row& a, const Row& b) { return a.result.step_s < b.result.step_s; });
  std::printf("\n%-52s %10s %9s %9s %9s %7s\n", "layout (fastest first)", "step ms", "compute",
              "exposed", "bubble", "link");
  for (const Row& r : rows)
    std::printf("%-52s %10.2f %9.2f %9.2f %9.2f %6.0f%%\n", describe(r.layout).c_str(),
                r.result.step_s * 1e3, median_of(r.result, &sim::train::RankTime::compute_s) * 1e3,
                median_of(r.result, &sim::train::RankTime::exposed_s) * 1e3,
                median_of(r.result, &sim::train::RankTime::bubble_s) * 1e3,
                r.result.busiest_busy * 100);
  std::printf("best: %s, %.2f ms a step\n", describe(rows[0].layout).c_str(),
              rows[0].result.step_s * 1e3);
  if (!skipped.empty()) std::printf("not replayed (not layouts of this job, or past the replay's limits):\n");
  for (const std::string& why : skipped) std::printf("  %s\n", why.c_str());
  return 0;
}

}  // namespace

int sim_train_main(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::fputs(
          "usage: plait sim train --layout FILE | --timeline FILE [--step K]\n"
          "                       --topology SPEC [--ranks-per-host M] [--chunk B] [--tune FILE]\n"
          "                       [--intra-rate R] [--reduce-rate R] [--replay auto|full|copies|pipeline]\n"
          "                       [--sweep [--ranks N] [--tp A,B] [--pp A,B] [--schedules S,T]]\n"
          "                       [--json FILE] [--path LINES]\n"
          "One training step replayed on a modelled network: every rank's compute, and the\n"
          "schedules of its collectives and pipeline messages sharing links max-min. --layout:\n"
          "a JSON description of the model and its degrees (docs/sim.md); --timeline: a trace\n"
          "plait.torch.timeline recorded (PATH.json), the recorded step of median length or\n"
          "--step K. Prints the step time, compute, exposed communication and bubble over the\n"
          "ranks, the busiest link and the critical path. --sweep: every dp x tp x pp of N ranks\n"
          "(tp within a host) and schedule for the layout's model, fastest first (--tp, --pp,\n"
          "--schedules: only those); layouts that do not fit memory_per_rank are listed apart.\n"
          "--intra-rate: a host's memory path among its ranks (NVLink: 8 GPUs x 450 GB/s is\n"
          "28800gbit); --reduce-rate: reductions and copies (a GPU's: 8000gbit); else --tune's\n"
          "or this CPU's defaults. --replay copies: each TP group through its first rank (tp\n"
          "times fewer ranks); pipeline: one pipeline standing for all (its DP allreduces\n"
          "through their first rank, mirrored by a ring's shift or a hypercube's xor); a\n"
          "message waits for its slowest copy where copies' paths differ. auto: pipeline above\n"
          "4,096 ranks (copies with ep > 1), else every rank.\n",
          stdout);
      return 0;
    }
  const TrainOptions o = parse(args);
  const auto topology = sim::parse_topology(o.topology);
  sim::train::DagOptions dag;
  dag.sim = params_from(o.tune);
  if (o.intra_rate > 0) dag.sim.intra_bytes_per_s = o.intra_rate;
  // A step is many calls: ten times the single collective's guard (minutes here, not hours).
  dag.sim.max_flows_solved = o.max_flows_solved > 0 ? o.max_flows_solved : 4e9;
  if (o.reduce_rate > 0) dag.sim.gamma_bytes_per_s = dag.sim.copy_bytes_per_s = o.reduce_rate;
  dag.placement.ranks_per_host = o.ranks_per_host;
  dag.chunk_bytes = o.chunk_bytes;
  if (!o.layout.empty()) {
    const sim::train::Layout layout =
        sim::train::parse_layout(read_file(o.layout), o.sweep ? 0 : o.ranks);
    if (o.sweep) return sweep(o, layout, *topology, dag);
    dag.placement.ranks = layout.ranks();
    std::printf("plait sim train: %s, %s on %s, %d a host\n", o.layout.c_str(),
                describe(layout).c_str(), topology->spec().c_str(), o.ranks_per_host);
    const sim::train::StepGraph step = step_of(o, layout);
    if (step.copies > 1)
      std::printf("replayed through %s (%d ranks, each for %d)\n",
                  step.ranks == layout.pp ? "one pipeline" : "each TP group's first rank",
                  step.ranks, step.copies);
    const auto started = std::chrono::steady_clock::now();
    const sim::train::TrainResult r = sim::train::replay_step(*topology, step, dag);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    report(*topology, r, o.path_lines);
    std::printf("replayed in %.1f s\n", took);
    append(o.json, record(*topology, layout.ranks(), &layout, r, took));
    return 0;
  }
  const sim::train::RecordedStep recorded = sim::train::read_timeline(read_file(o.timeline), o.step);
  dag.placement.ranks = recorded.graph.ranks;
  std::printf("plait sim train: %s, step %d of %d, %d ranks on %s, %d a host\n",
              o.timeline.c_str(), recorded.step, recorded.steps, recorded.graph.ranks,
              topology->spec().c_str(), o.ranks_per_host);
  const sim::train::TrainResult r = sim::train::replay_step(*topology, recorded.graph, dag);
  report(*topology, r, o.path_lines);
  std::printf("measured %.3f ms, replayed %.3f ms (%+.1f %%)\n", recorded.measured_s * 1e3,
              r.step_s * 1e3, (r.step_s / recorded.measured_s - 1) * 100);
  append(o.json, record(*topology, recorded.graph.ranks, nullptr, r, 0));
  return 0;
}

}  // namespace plait::cli
