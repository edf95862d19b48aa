// `plait sim`: plait's schedules on networks it does not run on (src/sim).
//
//   plait sim topo [SPEC ...] [--json FILE]   what the notes tabulate for each topology: hosts,
//                                             switches, cables, diameter, bisection, cost
#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "plait/commands.h"
#include "plait/error.h"
#include "plait/sim/plot.h"
#include "plait/sim/replay.h"
#include "plait/sim/train.h"
#include "sim/topology_spec.h"

namespace plait::cli {
namespace {

constexpr const char* kUsage =
    "usage: plait sim OP --topology SPEC --ranks N [--ranks-per-host M] [--algo A|all|none]\n"
    "                 --bytes B [--chunk B] [--tune FILE] [--json FILE] [--plot FILE.png]\n"
    "                 [--replay auto|full|symmetric]\n"
    "       plait sim sweep OP --topology SPEC [--topology SPEC ...] --ranks N[,N...]\n"
    "                 --bytes B[,B...] [--ranks-per-host M] [--tune FILE] [--json FILE]\n"
    "                 [--plot FILE.png]\n"
    "       plait sim topo [SPEC ...] [--json FILE]\n"
    "       plait sim plot RECORDS.json --out FILE.png [--title TEXT]\n"
    "       plait sim train --layout FILE | --timeline FILE ... (plait sim train --help)\n"
    "OP (allreduce, reduce_scatter, allgather, alltoall, broadcast, reduce, gather, scatter):\n"
    "replays the schedules plait's builders make for every rank on the topology (links shared\n"
    "max-min fairly, ranks placed in blocks of M per host) and prints time, busbw, the busiest\n"
    "link, and the cost model's own choice beside the fastest (--algo none: the choice and\n"
    "its reason alone, nothing replayed). B as plait bench counts it\n"
    "(suffixes K M G); --chunk is the pipelining unit (default 1M, as PLAIT_CHUNK_BYTES);\n"
    "--tune takes a `plait tune` file for per-message, intra-host, reduction and copy costs.\n"
    "--replay: auto (through host 0's ranks, or else through one rank a host, where that is\n"
    "exact or the only way; else every rank), full (every rank), symmetric (through host 0's\n"
    "ranks wherever the call is symmetric, else through one rank a host wherever a host's\n"
    "ranks mirror its first: the slowest copy where copies differ, an upper bound).\n"
    "sweep: every algorithm at every point, busbw per algorithm, the fastest and the cost\n"
    "model's choice (\"MODEL WRONG\" where its pick is over 10 % slower than the fastest,\n"
    "\"close\" within 10 %).\n"
    "--plot draws the records with matplotlib (.venv/bin/python): a sweep's busbw\n"
    "against bytes per algorithm, one operation's time per algorithm.\n"
    "plot: draws records written by --json (of sweeps, or of several runs appended to one\n"
    "file) as a sweep: busbw against bytes, a panel per topology and rank count.\n"
    "topo:\n"
    "Node count, cable count, diameter (hops between the two farthest hosts), bisection\n"
    "bandwidth (one direction, the worst even split of the hosts) and cost per host (cables\n"
    "and switch ports bought per host) of each topology. Without a SPEC: a comparison of the\n"
    "families at about 64 hosts.\n"
    "SPEC: ring:hosts=N | mesh:hosts=N | star:hosts=N | torus:dims=AxB[xC]\n"
    "      | fattree:k=K[,oversub=R][,ecmp=flow|packet]\n"
    "      | dragonfly:a=A,p=P,h=H[,arrangement=absolute|circulant][,routing=minimal|valiant]\n"
    "      each with [,rate=1gbit][,latency=1us][,burst=B[,peak=R]][,mtu=M][,queue=fair|fifo]\n"
    "      for its links (burst: a TBF shaper on each link; mtu: TCP/IPv4 over Ethernet frames\n"
    "      of M bytes, so messages get (M - 52) / (M + 14) of the rate; queue=fifo: a host's\n"
    "      link sends its ranks' messages in posting order instead of sharing it max-min)\n";

const std::vector<std::string> kComparison = {
    "ring:hosts=64", "mesh:hosts=64", "torus:dims=8x8", "torus:dims=4x4x4", "fattree:k=6",
    "fattree:k=8,oversub=2", "dragonfly:a=4,p=2,h=2", "star:hosts=64"};

int topo_main(const std::vector<std::string>& args) {
  std::vector<std::string> specs;
  std::string json;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (args[i] == "--json") {
      if (i + 1 == args.size()) throw invalid_usage("--json needs a file");
      json = args[++i];
      continue;
    }
    if (args[i].rfind("--", 0) == 0) throw invalid_usage("unknown option " + args[i]);
    specs.push_back(args[i]);
  }
  if (specs.empty()) specs = kComparison;
  std::ofstream out;
  if (!json.empty()) {
    out.open(json);
    if (!out) throw Error(ErrorCategory::kSystem, "cannot write " + json);
  }
  std::printf("%-40s %7s %8s %7s %8s %15s %12s %12s\n", "topology", "hosts", "switches",
              "cables", "diameter", "bisection(Gb/s)", "cables/host", "ports/host");
  for (const std::string& spec : specs) {
    const auto t = sim::parse_topology(spec);
    const sim::TopologyFacts f = t->facts();
    // The spec as given (the link part is the same for every row of a comparison).
    const double gbits = f.bisection_bytes_per_s * 8 / 1e9;
    std::printf("%-40s %7d %8d %7d %8d %15.1f %12.2f %12.2f\n", spec.c_str(), f.hosts,
                f.switches, f.cables, f.diameter, gbits, f.cables_per_host,
                f.switch_ports_per_host);
    if (out) {
      char line[512];
      std::snprintf(line, sizeof line,
                    "{\"topology\": \"%s\", \"hosts\": %d, \"switches\": %d, \"cables\": %d, "
                    "\"diameter\": %d, \"bisection_Gbps\": %.6g, \"cables_per_host\": %.6g, "
                    "\"switch_ports_per_host\": %.6g}\n",
                    t->spec().c_str(), f.hosts, f.switches, f.cables, f.diameter, gbits,
                    f.cables_per_host, f.switch_ports_per_host);
      out << line;
    }
  }
  return 0;
}

int plot_main(const std::vector<std::string>& args) {
  std::string records, png, title = "plait sim";
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() -> const std::string& {
      if (i + 1 == args.size()) throw invalid_usage(args[i] + " needs a value");
      return args[++i];
    };
    if (args[i] == "--out") png = value();
    else if (args[i] == "--title") title = value();
    else if (args[i].rfind("--", 0) == 0) throw invalid_usage("unknown option " + args[i]);
    else if (records.empty()) records = args[i];
    else throw invalid_usage("plot takes one records file");
  }
  if (records.empty() || png.empty()) throw invalid_usage("plot needs RECORDS.json and --out FILE.png");
  if (!std::ifstream(records)) throw invalid_usage("plot: no file " + records);
  plot_sim_records(SimPlotKind::kSweep, records, /*temporary=*/false, png, title);
  std::printf("plot: %s\n", png.c_str());
  return 0;
}

}  // namespace

int sim_main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  try {
    if (args[0] == "topo") return topo_main({args.begin() + 1, args.end()});
    if (args[0] == "sweep") return sim_sweep_main({args.begin() + 1, args.end()});
    if (args[0] == "plot") return plot_main({args.begin() + 1, args.end()});
    if (args[0] == "train") return sim_train_main({args.begin() + 1, args.end()});
    return sim_run_main(args);
  } catch (const Error& e) {
    // The simulator's errors say "sim: ..." for the library's callers; here the line already
    // starts "plait sim: ".
    std::string_view what = e.what();
    if (what.starts_with("sim: ")) what.remove_prefix(5);
    // `plait sim train --help` has its own usage; the replays' usage would not help there.
    const bool usage = e.category() == ErrorCategory::kInvalidUsage && args[0] != "train";
    std::fprintf(stderr, "plait sim: %.*s\n%s", static_cast<int>(what.size()), what.data(),
                 usage ? kUsage : "");
    return e.category() == ErrorCategory::kInvalidUsage ? 2 : 1;
  }
}

}  // namespace plait::cli
