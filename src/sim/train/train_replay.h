// `plait sim train`'s replay: a StepGraph's dependency graph (step_dag.h) run on a topology,
// every rank at once on one FlowNetwork, so that the step's concurrent collectives and
// pipeline messages share links max-min fairly. A compute task holds its rank's thread for
// its seconds; a message waits the per-message software cost and its path's latency, then
// drains at its fair rate, one at a time per (call, pair) as a connection delivers them; a
// reduction or copy holds the rank's core (replay.h's model, for every call of the step).
#pragma once

#include <string>
#include <vector>

#include "sim/topology.h"
#include "sim/train/step_dag.h"

namespace plait::sim::train {

// Where a rank's step went, as plait.torch.timeline splits a recorded one.
struct RankTime {
  double end_s = 0;        // its last task done, from its start
  double compute_s = 0;    // its compute tasks
  double exposed_s = 0;    // waiting for a call that was on the wire (every member had started it)
  double bubble_s = 0;     // waiting for a call some member had not started yet
  double idle_s = 0;       // the rest of the step: done before the slowest rank
};

struct TrainResult {
  // The longest rank's step, from its start to its last task; with every rank starting at
  // 0 (StepGraph::starts empty), until every call is done where that is later.
  double step_s = 0;
  std::vector<RankTime> ranks;
  size_t messages = 0;
  double network_bytes = 0;      // bytes that crossed hosts
  std::vector<double> link_bytes;
  int busiest_link = -1;         // -1: no byte crossed a host
  double busiest_busy = 0;       // its share of the step at full rate
  // What set the step's time, first first: "rank 1 F mb 0 (1.00 ms) 0.00-1.00 ms".
  std::vector<std::string> critical_path;
  std::vector<std::string> algorithms;  // by call: the schedule it ran
  size_t nodes = 0;                     // tasks and schedule steps replayed
};

// Throws kInvalidUsage where build_dag() does, and where the replay ends with a task not done
// (a deadlock: ranks waiting for each other's calls in opposite orders), naming the rank, the
// task and the call it waits for.
TrainResult replay_step(const Topology& topology, const StepGraph& graph,
                        const DagOptions& options);

}  // namespace plait::sim::train
