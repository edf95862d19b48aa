#include "plait/tune/options.h"

#include <algorithm>
#include <charconv>

#include "plait/error.h"

namespace plait::cli {
namespace {

std::vector<std::string> split_providers(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string name = text.substr(start, comma - start);
    if (std::find(std::begin(kTunableProviders), std::end(kTunableProviders), name) ==
        std::end(kTunableProviders))
      throw invalid_usage("--providers: unknown provider '" + name + "' (known: shm, tcp, ucx)");
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
    start = comma + 1;
  }
  return out;
}

}  // namespace

TuneOptions parse_tune_args(const std::vector<std::string>& args) {
  TuneOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const size_t eq = arg.find('=');
    const bool has_inline = arg.starts_with("--") && eq != std::string::npos;
    const std::string name = has_inline ? arg.substr(0, eq) : arg;
    const size_t first = i;
    auto value = [&]() -> std::string {
      if (has_inline) return arg.substr(eq + 1);
      if (i + 1 >= args.size()) throw invalid_usage(name + " needs a value");
      return args[++i];
    };
    if (name == "-h" || name == "--help") {
      o.help = true;
    } else if (name == "-n" || name == "--nranks") {
      const std::string text = value();
      const char* end = text.data() + text.size();
      auto [ptr, ec] = std::from_chars(text.data(), end, o.nranks);
      // Latency and bandwidth are properties of a pair of ranks.
      if (ec != std::errc() || ptr != end || o.nranks < 2)
        throw invalid_usage(name + " takes an integer >= 2, not '" + text + "'");
      continue;  // the launched ranks run in the job this starts, so -n is not forwarded
    } else if (name == "--providers") {
      o.providers = split_providers(value());
    } else if (name == "--out" || name == "-o") {
      o.out = value();
      if (o.out.empty()) throw invalid_usage(name + " needs a file name");
    } else if (name == "--topology") {
      o.topology = value();
    } else if (name == "--ranks" || name == "--ranks-per-host") {
      const std::string text = value();
      int n = 0;
      auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
      if (ec != std::errc() || ptr != text.data() + text.size() || n < 1)
        throw invalid_usage(name + " takes a positive integer, not '" + text + "'");
      (name == "--ranks" ? o.ranks : o.ranks_per_host) = n;
    } else if (name == "--quick") {
      o.quick = true;
    } else if (name == "-v" || name == "--verbose") {
      o.verbose = true;
    } else {
      throw invalid_usage("unknown argument '" + arg + "' (plait tune --help lists them)");
    }
    o.forwarded_args.insert(o.forwarded_args.end(), args.begin() + first, args.begin() + i + 1);
  }
  if (o.topology.empty() && (o.ranks > 0 || o.ranks_per_host != 1))
    throw invalid_usage("--ranks and --ranks-per-host go with --topology");
  return o;
}

std::string tune_usage() {
  return "usage: plait tune [-n N] [--providers shm,tcp,ucx] [--out FILE] [--quick] [-v]\n"
         "       plait tune --topology SPEC --ranks N [--ranks-per-host M] [--out FILE]\n"
         "Measures this machine's cost constants and writes them where the cost model\n"
         "reads them (PLAIT_TUNE_FILE, else $XDG_CACHE_HOME/plait/tune.conf, else\n"
         "~/.cache/plait/tune.conf). Per provider: ping-pong between ranks 0 and 1, sizes\n"
         "8 B .. 4 MiB, a least-squares fit of alpha (latency) and beta (bandwidth) to the\n"
         "one-way times; on this host: the reduction (f32 sum) and memcpy bandwidths.\n"
         "  -n N              ranks to launch on this host (default 2; inside a job: its ranks)\n"
         "  --providers LIST  comma-separated, of shm, tcp, ucx (default shm,tcp); one that\n"
         "                    cannot start here is reported and skipped\n"
         "  --out FILE        where to write (default: as above); values not measured in this\n"
         "                    run are kept from the file already there\n"
         "  --quick           few sizes and repetitions (seconds; for tests, not for tuning)\n"
         "  -v, --verbose     per-size medians next to the fitted model\n"
         "With --topology (a plait sim SPEC: the network the jobs run on, which they cannot\n"
         "measure from inside): nothing is measured; plait sim's model of SPEC gives how much\n"
         "slower than alone a flow runs when every host of a job of N ranks, M a host, talks\n"
         "at once in each pattern plait's algorithms use (hosts 1, 2, 4, ... apart; a ring), and\n"
         "those go to the file's \"net\" scope, beside the measured values, which are kept.\n";
}

}  // namespace plait::cli
