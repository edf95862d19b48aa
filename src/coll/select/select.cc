#include "coll/select/select.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "coll/schedule/hosts.h"
#include "plait/error.h"

namespace plait::coll {
namespace {

bool applies(const AlgorithmInfo& info, const CollArgs& args) {
  return info.applies == nullptr || info.applies(args);
}

std::string available(const CollArgs& args) {
  std::string out;
  for (const AlgorithmInfo& info : all_algorithms()) {
    if (info.op != args.op || !applies(info, args)) continue;
    if (!out.empty()) out += ", ";
    out += to_string(info.algorithm);
  }
  return out;
}

Selection forced(const CollArgs& args, const std::string& name, const std::string& source) {
  Algorithm algo;
  if (!parse_algorithm(name, &algo)) {
    throw invalid_usage("unknown algorithm '" + name + "' (" + source + "); " +
                        std::string(to_string(args.op)) + " has: " + available(args));
  }
  const AlgorithmInfo* info = find_algorithm(args.op, algo);
  if (info == nullptr || !applies(*info, args)) {
    // The one shape-dependent refusal gets its reason spelled out.
    const std::string why = info != nullptr && algo == Algorithm::kHierarchical
                                ? " (it needs ranks on two or more hosts, some host holding "
                                  "more than one)"
                                : "";
    throw invalid_usage("algorithm '" + name + "' does not apply to " +
                        std::string(to_string(args.op)) + why + " (" + source +
                        "); available: " + available(args));
  }
  return {info, "forced by " + source};
}

}  // namespace

// The hierarchical allreduce's own choice: where its intra-host stages run.
Selection with_stages(Selection s, const CollArgs& args, const CostParams& params) {
  if (s.info->algorithm == Algorithm::kHierarchical && hierarchical_intra_on_segment(args, params)) {
    s.intra_on_segment = true;
    s.reason += "; within hosts on their collective segments";
  }
  return s;
}

Selection select_algorithm(const CollArgs& args, const std::string& call_choice,
                           const Config& config, const CostParams& params) {
  if (!call_choice.empty() && call_choice != "auto")
    return with_stages(
        forced(args, call_choice, "the call's algorithm option '" + call_choice + "'"), args,
        params);
  std::string op_name(to_string(args.op));
  auto it = config.algo.find(op_name);
  if (it != config.algo.end() && !it->second.empty() && it->second != "auto") {
    std::string var = "PLAIT_ALGO_" + op_name;
    std::transform(var.begin(), var.end(), var.begin(), ::toupper);
    return with_stages(forced(args, it->second, var + "=" + it->second), args, params);
  }

  struct Candidate {
    const AlgorithmInfo* info;
    double cost;
  };
  std::vector<Candidate> candidates;
  for (const AlgorithmInfo& info : all_algorithms())
    if (info.op == args.op && applies(info, args))
      candidates.push_back({&info, info.cost(args, params)});
  if (candidates.empty())
    throw invalid_usage("no algorithm applies to " + op_name + " with this shape");
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.cost < b.cost; });
  std::ostringstream why;
  why << "cost model (alpha " << params.alpha_us << " us, beta " << params.beta_bytes_per_us
      << " B/us";
  if (spans_hosts(args)) {
    // Flat algorithms were charged the inter-host link (algorithms.h): say which.
    const CostParams inter = params.across_hosts();
    why << "; between hosts alpha " << inter.alpha_us << " us, beta "
        << inter.beta_bytes_per_us << " B/us";
    // The network's contention decides between algorithms of equal bytes: say it was known.
    if (!params.host_contention.empty()) {
      why << "; network contention at 1, 2, 4, ... hosts apart";
      for (double c : params.host_contention) {
        char buf[32];
        std::snprintf(buf, sizeof buf, " %.2g", c);
        why << buf;
      }
      why << ", ring " << params.ring_contention;
    } else {
      why << "; a non-blocking network";
    }
  }
  why << "):";
  for (size_t i = 0; i < candidates.size() && i < 4; ++i) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f", candidates[i].cost);
    why << (i ? " < " : " ") << to_string(candidates[i].info->algorithm) << " " << buf << " us";
  }
  return with_stages({candidates.front().info, why.str()}, args, params);
}

}  // namespace plait::coll
