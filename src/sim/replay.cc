#include "sim/replay.h"

#include <optional>

#include "coll/select/algorithms.h"
#include "plait/error.h"
#include "sim/full_replay.h"
#include "sim/schedule_size.h"
#include "sim/symmetric_replay.h"

namespace plait::sim {

using coll::StepKind;

double core_seconds(const coll::Step& step, size_t elem_bytes, const SimParams& params) {
  switch (step.kind) {
    case StepKind::kCopy:
      return step.src.count * elem_bytes / params.copy_bytes_per_s;
    case StepKind::kReduce:
    case StepKind::kRecvReduce:  // the staging slice (src) holds what came in
      return step.src.count * elem_bytes / params.gamma_bytes_per_s;
    default:
      return 0;
  }
}

void find_bottleneck(const Topology& topology, ReplayResult* r) {
  r->bottleneck_link = -1;
  r->bottleneck_busy = 0;
  for (size_t l = 0; l < r->link_bytes.size(); ++l) {
    if (r->time_s <= 0 || r->link_bytes[l] <= 0) continue;
    const double busy = r->link_bytes[l] / (topology.links()[l].bytes_per_s * r->time_s);
    // Ties (links equally busy but for rounding) go to the first.
    if (busy > r->bottleneck_busy * (1 + 1e-9))
      r->bottleneck_busy = busy, r->bottleneck_link = static_cast<int>(l);
  }
}

ReplayResult replay(const Topology& topology, const Placement& placement, coll::CollArgs args,
                    coll::Algorithm algorithm, const SimParams& params, ReplayMode mode) {
  if (placement.ranks < 1 || placement.ranks_per_host < 1)
    throw invalid_usage("sim: ranks and ranks per host are at least 1");
  const int hosts_needed = (placement.ranks + placement.ranks_per_host - 1) / placement.ranks_per_host;
  if (hosts_needed > topology.hosts())
    throw invalid_usage("sim: " + std::to_string(placement.ranks) + " ranks at " +
                        std::to_string(placement.ranks_per_host) + " per host need " +
                        std::to_string(hosts_needed) + " hosts; " + topology.spec() + " has " +
                        std::to_string(topology.hosts()));
  args.size = placement.ranks;
  args.host_of.clear();
  if (hosts_needed > 1)
    for (int r = 0; r < placement.ranks; ++r) args.host_of.push_back(placement.host_of(r));
  const coll::AlgorithmInfo* info = coll::find_algorithm(args.op, algorithm);
  if (!info || !info->build)
    throw invalid_usage("sim: " + std::string(coll::to_string(args.op)) + " has no algorithm '" +
                        std::string(coll::to_string(algorithm)) + "' to replay");
  if (info->applies && !info->applies(args))
    throw invalid_usage("sim: " + std::string(coll::to_string(algorithm)) + " does not apply to " +
                        std::string(coll::to_string(args.op)) + " on " +
                        std::to_string(placement.ranks) + " ranks");
  // Every rank's schedule is held at once: refuse what would not fit rather than run for
  // hours or out of memory. Sized from a sample of ranks (rank 0 alone stands badly for a
  // parameter server, whose few roots hold most of the steps).
  const ScheduleSize size = sample_schedule_size(args, *info, placement.ranks);
  const double steps = size.steps;
  const bool fits = steps <= kMaxReplaySteps &&
                    (placement.ranks <= kMaxFullReplayRanks || size.sends <= kMaxMessagesAtScale);
  // Above kMaxFullReplayRanks the full replay of an algorithm whose ranks all send at once
  // (ring, halving-doubling, recursive doubling) re-solves ~p flows at ~p events per round:
  // hours at 16,384 ranks. Those are the symmetric ones; trees stay cheap in full.
  if (mode != ReplayMode::kFull)
    if (std::optional<SymmetricReplay> s = replay_symmetric(topology, placement, args, *info, params);
        s && (s->exact || !fits || placement.ranks > kMaxFullReplayRanks ||
              mode == ReplayMode::kSymmetric)) {
      s->result.method = "symmetric (" + s->relabelling + (s->exact ? ")" : ", slowest copy)");
      return std::move(s->result);
    }
  // Where every rank of a host does what its first rank does, with the host's ranks
  // relabelled (the hierarchical allreduce, pipelined or not), the first ranks stand for the
  // others: a host's worth fewer steps, exact where the copies share their paths (else each
  // message waits for its slowest copy). A replay that turns out inexact where the full one
  // fits cost an eighth of it, at 8 ranks a host, and is dropped for it.
  const int per_host = placement.ranks_per_host;
  const bool copies_fit = per_host > 1 && steps / per_host <= kMaxReplaySteps &&
                          size.sends / per_host <= kMaxCopiedMessages;
  if (mode != ReplayMode::kFull && copies_fit)
    if (std::optional<InHostReplay> r = replay_in_host_copies(topology, placement, args, *info, params);
        r && (r->exact || !fits || mode == ReplayMode::kSymmetric))
      return std::move(r->result);
  if (!fits) {
    throw invalid_usage(
        "sim: " + std::string(coll::to_string(algorithm)) + " " +
        std::string(coll::to_string(args.op)) + " on " + std::to_string(placement.ranks) +
        " ranks is about " + std::to_string(static_cast<long long>(steps)) +
        " steps and " + std::to_string(static_cast<long long>(size.sends)) +
        " messages; the full replay takes up to " +
        std::to_string(static_cast<long long>(kMaxReplaySteps)) + " steps (above " +
        std::to_string(kMaxFullReplayRanks) + " ranks, " +
        std::to_string(static_cast<long long>(kMaxMessagesAtScale)) + " messages; through one rank " +
        "a host, " + std::to_string(static_cast<long long>(kMaxCopiedMessages)) + ")" +
        ", and this call is not symmetric enough to replay through one rank or one rank a "
        "host (fewer ranks, a larger --chunk, or fewer bytes)");
  }
  return replay_every_rank(topology, placement, args, *info, params);
}

}  // namespace plait::sim
