// A StepGraph unrolled into one dependency graph of every rank: each program task a node
// chained to the one before it on its rank's thread; each call, on each member, the steps of
// the schedule plait's builder gives that member (its peers mapped to global ranks), behind a
// gate (the member issued it, and its group's call before it is done there) and ahead of a
// join (done on that member). A send and the receive it pairs with are one message.
//
// A collective whose members all sit on one host crosses no network link: it is one node of
// the time its schedule takes alone on that host (replay.h), which is exact while it has the
// host's memory path to itself (tensor parallelism within a host, with the data-parallel and
// pipeline traffic crossing hosts), and keeps a step of 16,384 ranks to a size this machine
// replays (tensor-parallel allreduces are most of a step's schedule steps).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/replay.h"
#include "sim/topology.h"
#include "sim/train/step_graph.h"

namespace plait::sim::train {

using NodeId = uint32_t;
inline constexpr NodeId kNoNode = UINT32_MAX;

enum class NodeKind : uint8_t {
  kTask,        // a program task: compute for `seconds`, or an issue or wait marker (0 s)
  kJoin,        // a call's gate or its end on a member: done once its dependencies are
  kSend,        // `bytes` to `peer` (a message)
  kRecv,        // its message from `peer` arrived
  kRecvReduce,  // then `seconds` on the rank's core
  kLocal,       // a copy or reduction: `seconds` on the rank's core
  // A call whose members share one host, as a whole: `seconds`, its schedule's time replayed
  // alone on the host's memory path (once per shape), from when every member has started it.
  kHostCall,
};

struct Node {
  double seconds = 0;
  double bytes = 0;
  int32_t rank = -1;
  int32_t peer = -1;     // global
  int32_t call = -1;     // steps, gates and ends: their call; tasks: the call they issue or wait
  int32_t message = -1;  // kSend, kRecv, kRecvReduce
  int32_t group_peer = -1;  // a call among copies (load_copies_call): the step's group peer
  int32_t group_rank = 0;   // and, where every group rank is replayed, whose step it is
  uint32_t index = 0;    // kTask: its place in the program; steps: in the member's schedule
  NodeKind kind = NodeKind::kTask;
};

struct Message {
  NodeId send = kNoNode;
  NodeId recv = kNoNode;
};

// A call on one member: where it starts and where it is done.
struct CallEnds {
  NodeId gate = kNoNode;
  NodeId done = kNoNode;
};

// How a call among a rank's copies maps its first copy's messages to the others' (copy q's
// peer of p): p + q mod n, or p ^ q.
// kEvery: no such symmetry (a tree), so every group rank's schedule is replayed on the one
// rank, each step standing for its copies in the other sets of copies.
enum class Symmetry : uint8_t { kNone, kShift, kXor, kEvery };

struct StepDag {
  std::vector<Node> nodes;
  std::vector<uint32_t> deps;                 // by node: how many it waits for
  std::vector<uint32_t> dependents_at;        // node n's: dependents[at[n], at[n + 1])
  std::vector<NodeId> dependents;
  std::vector<Message> messages;
  std::vector<std::vector<CallEnds>> ends;    // by call, parallel to its members
  std::vector<std::string> algorithms;        // by call: "ring", "p2p"
  std::vector<Symmetry> symmetry;             // by call (kNone but for calls among copies)
  std::vector<NodeId> last_task;              // by rank: its program's last node (or none)
};

struct DagOptions {
  SimParams sim;
  Placement placement;           // the job's ranks on hosts (StepGraph::copies included)
  size_t chunk_bytes = 1 << 20;  // the pipelining unit, as PLAIT_CHUNK_BYTES
};

// Throws kInvalidUsage for a graph check() refuses, a forced algorithm that does not apply
// to its call, and more ranks than the topology's hosts hold.
StepDag build_dag(const Topology& topology, const StepGraph& graph, const DagOptions& options);

}  // namespace plait::sim::train
