// A step recorded by plait.torch.timeline (its Perfetto trace, PATH.json) as a StepGraph: each
// rank's thread between the step's start and end, in time order, becomes compute tasks (its
// compute spans, less its waits in them), host tasks (the rest of its time: the framework's
// own work), the issue of each call it made and each wait for one. Collectives of one group
// pair across its members by their order in the group within the step; sends and receives by
// (sender, receiver, tag) and order. A call keeps the algorithm it ran where that is one of
// plait's schedules; else (the collective segment) the cost model picks for the network.
#pragma once

#include <string>

#include "sim/train/step_graph.h"

namespace plait::sim::train {

struct RecordedStep {
  StepGraph graph;
  int step = 0;                // which recorded step
  int steps = 0;               // how many were recorded
  double measured_s = 0;       // its time: the first start to the last end over the ranks
};

// `step` -1: the recorded step of median length. Throws kInvalidUsage for a file that is not
// such a trace, a trace recorded before calls named their members, a step out of range, an
// operation the simulator does not know, and calls that do not pair across ranks (naming the
// rank, the group and the call).
RecordedStep read_timeline(const std::string& json_text, int step = -1);

}  // namespace plait::sim::train
