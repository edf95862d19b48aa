// Replays a collective's schedules, the very ones src/coll's builders give the executor, on
// a topology: every rank's steps run as their dependencies allow; a send becomes a flow from
// its rank's host to the receiver's, sharing links max-min fairly with the flows in flight
// (FlowNetwork); a reduction or copy takes the rank's core for bytes / rate.
//
// Timing of one message of B bytes between ranks on different hosts: it starts when its send
// step is ready (the executor posts sends as soon as their data is), waits the per-message
// software cost alpha, its head crosses the path (the sum of the links' latencies), then its
// bytes drain at the flow's fair rate. The receive step completes once the bytes are in and
// the step's own dependencies are done (a receive reduces after that). Between ranks of one
// host a message crosses no network link: it shares the host's memory path (one resource per
// host, intra_bytes_per_s) after intra_alpha.
#pragma once

#include <string>
#include <vector>

#include "coll/schedule/schedule.h"
#include "sim/topology.h"

namespace plait::sim {

struct SimParams {
  double alpha_s = 5e-6;            // per message across hosts (software: post, complete)
  double intra_alpha_s = 1e-6;      // per message between ranks of one host
  double intra_bytes_per_s = 5e9;   // a host's memory path for messages among its ranks
  double gamma_bytes_per_s = 4e9;   // reduction of incoming data into a buffer
  double copy_bytes_per_s = 5e9;    // a local copy
  // The full replay stops with an error once its re-solves of max-min rates took this many
  // flows in all (minutes where every flow shares links with every other, as a
  // halving-doubling of 4,096 ranks on a fat tree hashing flows; docs/measurements.md).
  double max_flows_solved = 4e8;
};

// Seconds a step takes on its rank's core: a copy at copy_bytes_per_s, a reduction (and the
// reduction after a receive) at gamma_bytes_per_s; 0 for sends and plain receives. Both
// replays time local work with it.
double core_seconds(const coll::Step& step, size_t elem_bytes, const SimParams& params);

// Ranks on hosts: rank r on host r / ranks_per_host (block placement, as a launcher fills
// hosts); ranks must fit: ranks <= hosts * ranks_per_host.
struct Placement {
  int ranks = 2;
  int ranks_per_host = 1;
  int host_of(int rank) const { return rank / ranks_per_host; }
};

struct ReplayResult {
  double time_s = 0;           // from the start to the last rank's last step
  size_t messages = 0;         // network and intra-host
  // The schedule's shape, as the notes tabulate algorithms: rounds (messages on the longest
  // chain of messages, each waiting for the one before), and per rank what it sent.
  int rounds = 0;
  std::vector<size_t> sent_messages;
  std::vector<double> sent_bytes;
  double network_bytes = 0;    // bytes that crossed hosts (each counted once)
  // Per directed link of the topology: bytes carried and the share of the collective's time
  // it was busy at its full rate (bytes / (rate * time)).
  std::vector<double> link_bytes;
  int bottleneck_link = -1;      // the busiest link (-1 when no byte crossed a host)
  double bottleneck_busy = 0;    // its busy share, 0..1
  // The chain of steps that set the time, last first: "rank 3 step 12 recv_reduce from 2".
  std::vector<std::string> critical_path;
  // "full" (every rank's steps), or "symmetric (shift|xor)" for a replay through rank 0
  // (symmetric_replay.h), "symmetric (..., slowest copy)" where copies' rates differed.
  std::string method = "full";
};

// Fills result->bottleneck_link and bottleneck_busy from its link_bytes and time_s.
void find_bottleneck(const Topology& topology, ReplayResult* result);

// The most steps (over all ranks) a full replay takes on: ~1 GB of schedules and state, and
// minutes of work (a ring allreduce on 16,384 ranks is ~0.5 billion).
inline constexpr double kMaxReplaySteps = 20e6;
// Above this many ranks a symmetric call is replayed through rank 0 even where its copies'
// rates differ (replay()).
inline constexpr int kMaxFullReplayRanks = 4096;
// Above kMaxFullReplayRanks, the most messages a full replay takes on: each one re-solves the
// max-min rates of the flows that share links with it (a tree's: a few; calibrated on this
// 2-core machine: a double binary tree of 16,384 ranks on a fat tree, 1 GiB in 64 chunks,
// 2.1 million messages, 35 s); SimParams::max_flows_solved stops one whose flows all do.
inline constexpr double kMaxMessagesAtScale = 4e6;
// The most messages of the ranks replayed for their hosts (rank_copies.h; each carries its
// copies on the host's other ranks, one weighted flow where they share a path): calibrated
// on this 2-core machine with the pipelined hierarchical allreduce of 16,384 ranks (8 a host)
// and 1 GiB in 16 MiB chunks, 8.6 million messages of 2,048 ranks, 87 s on a dragonfly,
// 107 s on a fat tree.
inline constexpr double kMaxCopiedMessages = 10e6;

enum class ReplayMode : uint8_t {
  kAuto,  // through rank 0 where that is exact (or the only way), else every rank
  kFull,  // every rank's steps (the reference the symmetric replay is checked against)
  // Through host 0's ranks wherever the call is symmetric, exact or not (an upper bound where
  // copies differ: seconds instead of the full replay's minutes); else through the first rank
  // of each host where the hosts' ranks are relabellings of it (rank_copies.h); else every rank.
  kSymmetric,
};

// `args`: the call's shape (op, count, dtype, redop, root, chunk_count); rank, size and
// host_of are set here for every rank. A symmetric call (ring, halving-doubling, recursive
// doubling, hierarchical; hosts filled evenly) is replayed through host 0's ranks
// (symmetric_replay.h) where that is
// exact, or where the full replay would exceed its limits (then with the slowest copy's
// rates; ReplayResult::method says which). Else a call whose hosts' ranks are relabellings of
// their first rank (the pipelined hierarchical allreduce) is replayed through the first rank
// of each host (rank_copies.h) on the same terms. Throws kInvalidUsage for an algorithm that does not
// exist for the op or does not apply, for more ranks than the hosts can hold, and for a call
// beyond the full replay's limits that is not symmetric.
ReplayResult replay(const Topology& topology, const Placement& placement, coll::CollArgs args,
                    coll::Algorithm algorithm, const SimParams& params,
                    ReplayMode mode = ReplayMode::kAuto);

}  // namespace plait::sim
