#include "sim/train/train_replay.h"

#include <algorithm>
#include <cstdio>
#include <unordered_map>

#include "plait/error.h"
#include "sim/flow_network.h"
#include "sim/pair_fifo.h"
#include "sim/replay_events.h"

namespace plait::sim::train {
namespace {

struct NodeState {
  double ready = -1;
  double done = -1;
  NodeId cause = kNoNode;  // what its start or end waited for last
};

struct MessageState {
  double arrived = -1;
  int subflows_left = 0;
};

class StepReplay {
 public:
  StepReplay(const Topology& t, const StepGraph& g, const StepDag& dag, const DagOptions& o,
             const std::vector<double>& tokens)
      : topology_(t), graph_(g), dag_(dag), options_(o), states_(dag.nodes.size()),
        deps_left_(dag.deps), messages_(dag.messages.size()), network_(capacities(t)),
        core_free_(g.ranks, 0.0), core_last_(g.ranks, kNoNode) {
    for (size_t l = 0; l < t.links().size(); ++l)
      if (t.links()[l].burst_bytes > 0)
        network_.set_bucket(static_cast<int>(l), t.links()[l].burst_bytes,
                            t.links()[l].peak_bytes_per_s, tokens.empty() ? 0 : tokens[l]);
  }

  bool shaped() const {
    for (const Link& l : topology_.links())
      if (l.burst_bytes > 0) return true;
    return false;
  }

  std::vector<double> end_tokens() {
    std::vector<double> out(topology_.links().size());
    for (size_t l = 0; l < out.size(); ++l) out[l] = network_.tokens(static_cast<int>(l));
    return out;
  }

  TrainResult run() {
    for (NodeId n = 0; n < dag_.nodes.size(); ++n)
      if (deps_left_[n] == 0) push(start(dag_.nodes[n].rank), EventKind::kReady, n);
    run_events(
        events_, network_, [this](const Event& e) { handle(e); },
        [this](int f, double t) { subflow_done(f, t); },
        [this] {
          if (network_.solved() > options_.sim.max_flows_solved)
            throw invalid_usage(
                "sim train: the replay stopped at " + std::to_string(network_.now() * 1e3) +
                " ms of the step: its flows share links so widely that re-solving their rates "
                "took over " +
                std::to_string(static_cast<long long>(options_.sim.max_flows_solved)) +
                " flows (a larger chunk, or fewer ranks)");
        });
    check_all_done();
    network_.advance(std::max(network_.now(), end_));
    return result();
  }

 private:
  static std::vector<double> capacities(const Topology& t) {
    std::vector<double> c;
    for (const Link& l : t.links()) c.push_back(l.bytes_per_s);
    return c;
  }

  void push(double t, EventKind kind, uint32_t id) { events_.push(t, kind, id); }

  double start(int rank) const { return graph_.starts.empty() ? 0 : graph_.starts[rank]; }

  void handle(const Event& e) {
    switch (e.kind) {
      case EventKind::kReady: return ready(e.id, e.time);
      case EventKind::kDone: return done(e.id, e.time);
      case EventKind::kFlowStart: return flow_start(static_cast<int>(e.id));
    }
  }

  // A rank's core; a step of another group rank replayed on it (Symmetry::kEvery) runs on
  // that replica's core.
  int core_of(const Node& node) {
    if (node.group_rank == 0) return node.rank;
    const uint64_t key = static_cast<uint64_t>(node.rank) << 32 | static_cast<uint32_t>(node.group_rank);
    auto [it, added] = extra_cores_.try_emplace(key, static_cast<int>(core_free_.size()));
    if (added) core_free_.push_back(0), core_last_.push_back(kNoNode);
    return it->second;
  }

  void on_core(NodeId n, double at) {
    const int r = core_of(dag_.nodes[n]);
    if (core_free_[r] > at) {
      states_[n].cause = core_last_[r];
      at = core_free_[r];
    }
    core_free_[r] = at + dag_.nodes[n].seconds;
    core_last_[r] = n;
    push(core_free_[r], EventKind::kDone, n);
  }

  void ready(NodeId n, double t) {
    states_[n].ready = t;
    const Node& node = dag_.nodes[n];
    switch (node.kind) {
      case NodeKind::kTask:  // the thread is the chain of tasks: nothing else holds it
        return push(t + node.seconds, EventKind::kDone, n);
      case NodeKind::kJoin:
        return push(t, EventKind::kDone, n);
      case NodeKind::kHostCall:
        return push(t + node.seconds, EventKind::kDone, n);
      case NodeKind::kLocal:
        return on_core(n, t);
      case NodeKind::kRecv:
      case NodeKind::kRecvReduce:
        return maybe_received(n);
      case NodeKind::kSend: {
        double latency = 0;
        bool remote = false;
        routes_[node.message] = route_copies(node, &latency, &remote);
        const double alpha = remote ? options_.sim.alpha_s : options_.sim.intra_alpha_s;
        return push(t + alpha + latency, EventKind::kFlowStart, static_cast<uint32_t>(node.message));
      }
    }
  }

  // The paths of a message's copies (StepGraph::copies): copy t from the sender's t-th copy
  // to the receiver's (for a call among copies, to the copy its symmetry maps the peer to),
  // hashed apart; copies on the same paths, or in the same host, are one weighted flow.
  struct CopyPaths {
    std::vector<Path> paths;  // none: within `host`, on its memory path
    int host = -1;
    int weight = 0;
  };
  std::pair<int, int> copy_ends(const Node& send, int t) const {
    const int n = graph_.copies;
    const Symmetry kind = dag_.symmetry[send.call];
    if (kind == Symmetry::kNone) return {send.rank * n + t, send.peer * n + t};
    const Call& c = graph_.calls[send.call];
    const int size = c.copy_group > 0 ? c.copy_group : n, stride = c.copy_stride;
    if (kind == Symmetry::kEvery) {
      // Copy t of group rank k's step: in the t-th set of copies (the sets' first copies
      // taken in order), from its k-th to its peer's.
      const int set = t % stride + (t / stride) * stride * size;
      if (set >= n) return {-1, -1};
      return {send.rank * n + set + stride * send.group_rank,
              send.rank * n + set + stride * send.group_peer};
    }
    const int index = (t / stride) % size, base = t - stride * index;
    const int to = kind == Symmetry::kShift ? (send.group_peer + index) % size
                                            : send.group_peer ^ index;
    return {send.rank * n + t, send.rank * n + base + stride * to};
  }
  std::vector<CopyPaths> route_copies(const Node& send, double* latency, bool* remote) const {
    std::vector<CopyPaths> out;
    for (int t = 0; t < graph_.copies; ++t) {
      const auto [from_rank, to_rank] = copy_ends(send, t);
      if (from_rank < 0) break;  // kEvery: a step stands for one copy in each set
      const int from = options_.placement.host_of(from_rank);
      const int to = options_.placement.host_of(to_rank);
      CopyPaths copy{{}, from, 1};
      if (from != to) {
        copy.paths = topology_.route(from, to, static_cast<uint64_t>(send.message) * graph_.copies + t);
        copy.host = -1;
        double l = 0;
        for (int link : copy.paths[0].links) l += topology_.links()[link].latency_s;
        *latency = std::max(*latency, l);
        *remote = true;
      }
      auto same = std::find_if(out.begin(), out.end(), [&](const CopyPaths& c) {
        if (c.host != copy.host || c.paths.size() != copy.paths.size()) return false;
        for (size_t i = 0; i < c.paths.size(); ++i)
          if (c.paths[i].links != copy.paths[i].links) return false;
        return true;
      });
      if (same != out.end()) ++same->weight;
      else out.push_back(std::move(copy));
    }
    return out;
  }

  // A connection: (call, sender, receiver); in a call among copies the receiver is the
  // group peer.
  uint64_t fifo_key(const Node& send) const {
    const uint64_t to =
        send.group_peer >= 0
            ? static_cast<uint64_t>(send.group_rank) << 12 | static_cast<uint32_t>(send.group_peer)
            : static_cast<uint32_t>(send.peer);
    return static_cast<uint64_t>(send.call) << 40 | static_cast<uint64_t>(send.rank) << 24 | to;
  }

  void flow_start(int message) {
    const Node& send = dag_.nodes[dag_.messages[message].send];
    if (fifo_.admit(fifo_key(send), message)) begin_flow(message);
  }

  void begin_flow(int message) {
    const Node& send = dag_.nodes[dag_.messages[message].send];
    auto it = routes_.find(message);
    const std::vector<CopyPaths> groups = std::move(it->second);
    routes_.erase(it);
    messages_[message].subflows_left = 0;
    for (const CopyPaths& g : groups)
      messages_[message].subflows_left += std::max<int>(1, g.paths.size());
    for (const CopyPaths& g : groups) {
      if (g.paths.empty()) {  // copies within one host: its memory path
        add_subflow(message, send.bytes, {memory_path(g.host)}, g.weight);
        continue;
      }
      for (const Path& p : g.paths) add_subflow(message, send.bytes * p.share, p.links, g.weight);
      network_bytes_ += send.bytes * g.weight;
    }
  }

  void add_subflow(int message, double bytes, std::vector<int> links, int weight) {
    const int f = network_.add(bytes, std::move(links), 0, weight);
    if (static_cast<size_t>(f) >= flow_message_.size()) flow_message_.resize(f + 1, -1);
    flow_message_[f] = message;
  }

  int memory_path(int h) {
    auto [it, added] = memory_paths_.try_emplace(h, -1);
    if (added) it->second = network_.add_link(options_.sim.intra_bytes_per_s);
    return it->second;
  }

  void subflow_done(int flow, double t) {
    const int message = flow_message_[flow];
    if (--messages_[message].subflows_left > 0) return;
    messages_[message].arrived = t;
    const Message& m = dag_.messages[message];
    push(t, EventKind::kDone, m.send);
    maybe_received(m.recv);
    const int next = fifo_.release(fifo_key(dag_.nodes[m.send]));
    if (next >= 0) begin_flow(next);
  }

  void maybe_received(NodeId n) {
    NodeState& s = states_[n];
    const Node& node = dag_.nodes[n];
    const MessageState& m = messages_[node.message];
    if (s.ready < 0 || m.arrived < 0) return;
    double at = s.ready;
    if (m.arrived > at) {
      at = m.arrived;
      s.cause = dag_.messages[node.message].send;
    }
    if (node.kind == NodeKind::kRecv) return push(at, EventKind::kDone, n);
    on_core(n, at);
  }

  void done(NodeId n, double t) {
    states_[n].done = t;
    for (uint32_t i = dag_.dependents_at[n]; i < dag_.dependents_at[n + 1]; ++i) {
      const NodeId d = dag_.dependents[i];
      states_[d].cause = n;  // nodes finish in time order: the last one is what it waited for
      if (--deps_left_[d] == 0) push(t, EventKind::kReady, d);
    }
    if (t >= end_) end_ = t, end_node_ = n;
  }

  std::string describe(NodeId n) const {
    const Node& node = dag_.nodes[n];
    std::string out = "rank " + std::to_string(node.rank) + " ";
    if (node.kind == NodeKind::kTask) {
      const Task& t = graph_.programs[node.rank][node.index];
      if (t.kind == TaskKind::kCompute) return out + graph_.labels[t.label];
      return out + (t.kind == TaskKind::kIssue ? "issues " : "waits for ") +
             graph_.calls[t.call].name;
    }
    const Call& c = graph_.calls[node.call];
    out += c.name + " (" + dag_.algorithms[node.call] + ")";
    if (node.kind == NodeKind::kSend) out += " sends to " + std::to_string(node.peer);
    if (node.kind == NodeKind::kRecv || node.kind == NodeKind::kRecvReduce)
      out += " receives from " + std::to_string(node.peer);
    return out;
  }

  // A node not done once nothing is left to happen: ranks wait for each other in a cycle.
  void check_all_done() const {
    for (int r = 0; r < graph_.ranks; ++r) {
      NodeId stuck = kNoNode;
      for (NodeId n = dag_.last_task[r]; n != kNoNode && states_[n].done < 0;) {
        stuck = n;
        const uint32_t i = dag_.nodes[n].index;
        n = i == 0 ? kNoNode : n - 1;  // a rank's tasks are consecutive nodes
      }
      if (stuck == kNoNode) continue;
      const Task& t = graph_.programs[r][dag_.nodes[stuck].index];
      throw invalid_usage(
          "sim train: deadlock: " + describe(stuck) + " (task " +
          std::to_string(dag_.nodes[stuck].index) + ") never " +
          (t.kind == TaskKind::kWait ? "ends" : "starts") +
          ": its calls wait for calls of other ranks that wait for it (a group's calls issued "
          "in different orders on its members?)");
    }
  }

  // Consecutive nodes of one call on one rank are one line of the critical path.
  std::vector<std::string> critical_path() const {
    struct Span {
      NodeId first, last;
    };
    std::vector<Span> spans;
    for (NodeId n = end_node_; n != kNoNode; n = states_[n].cause) {
      const Node& node = dag_.nodes[n];
      if (node.kind == NodeKind::kJoin) continue;
      const bool task = node.kind == NodeKind::kTask;
      if (!task && !spans.empty()) {
        const Node& prev = dag_.nodes[spans.back().first];
        if (prev.kind != NodeKind::kTask && prev.call == node.call && prev.rank == node.rank) {
          spans.back().first = n;
          continue;
        }
      }
      if (task && node.seconds == 0) continue;  // issue and wait markers
      spans.push_back({n, n});
      if (spans.size() > 200) break;
    }
    std::vector<std::string> out;
    for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
      const Node& first = dag_.nodes[it->first];
      std::string line = describe(it->first);
      if (first.kind != NodeKind::kTask)
        line = "rank " + std::to_string(first.rank) + " " + graph_.calls[first.call].name + " (" +
               dag_.algorithms[first.call] + ")";
      const double from = states_[it->first].ready;
      char at[64];
      std::snprintf(at, sizeof at, ": %.3f-%.3f ms", from * 1e3, states_[it->last].done * 1e3);
      out.push_back(line + at);
    }
    return out;
  }

  TrainResult result() {
    TrainResult out;
    out.step_s = 0;
    out.messages = dag_.messages.size();
    out.network_bytes = network_bytes_;
    out.algorithms = dag_.algorithms;
    out.nodes = dag_.nodes.size();
    const std::vector<double>& carried = network_.link_bytes();
    out.link_bytes.assign(carried.begin(), carried.begin() + topology_.links().size());
    ReplayResult r;
    r.time_s = end_;
    r.link_bytes = out.link_bytes;
    find_bottleneck(topology_, &r);
    out.busiest_link = r.bottleneck_link;
    out.busiest_busy = r.bottleneck_busy;
    out.critical_path = critical_path();
    breakdown(&out);
    return out;
  }

  // A wait's time before the call was on the wire (every member past its gate) is bubble,
  // the rest exposed communication.
  void breakdown(TrainResult* out) const {
    out->ranks.resize(graph_.ranks);
    for (NodeId n = 0; n < dag_.nodes.size(); ++n) {
      const Node& node = dag_.nodes[n];
      if (node.kind != NodeKind::kTask) continue;
      RankTime& rt = out->ranks[node.rank];
      rt.end_s = std::max(rt.end_s, states_[n].done);
      const Task& t = graph_.programs[node.rank][node.index];
      if (t.kind == TaskKind::kCompute) {
        rt.compute_s += t.seconds;
        continue;
      }
      if (t.kind != TaskKind::kWait) continue;
      const double begin = node.index == 0 ? start(node.rank) : states_[n - 1].done;
      const double end = states_[n].done;
      double wire = 0;
      for (const CallEnds& e : dag_.ends[t.call]) wire = std::max(wire, states_[e.gate].done);
      const double split = std::clamp(wire, begin, end);
      rt.bubble_s += split - begin;
      rt.exposed_s += end - split;
    }
    // A rank's step: from its start to its last task; the job's: the longest of them, or
    // until its last call is done where that is later (calls nobody waited for).
    for (int r = 0; r < graph_.ranks; ++r) {
      out->ranks[r].end_s -= start(r);
      out->step_s = std::max(out->step_s, out->ranks[r].end_s);
    }
    if (graph_.starts.empty()) out->step_s = std::max(out->step_s, end_);
    for (RankTime& rt : out->ranks)
      rt.idle_s = std::max(0.0, out->step_s - rt.compute_s - rt.exposed_s - rt.bubble_s);
  }

  const Topology& topology_;
  const StepGraph& graph_;
  const StepDag& dag_;
  const DagOptions options_;
  std::vector<NodeState> states_;
  std::vector<uint32_t> deps_left_;
  std::vector<MessageState> messages_;
  FlowNetwork network_;
  std::vector<double> core_free_;
  std::vector<NodeId> core_last_;
  std::unordered_map<uint64_t, int> extra_cores_;  // (rank, group rank) -> index, beyond ranks
  std::unordered_map<int, std::vector<CopyPaths>> routes_;  // by message, until its flows start
  std::unordered_map<int, int> memory_paths_;          // by host
  std::vector<int> flow_message_;
  PairFifo fifo_;
  EventQueue events_;
  double network_bytes_ = 0;
  double end_ = 0;
  NodeId end_node_ = kNoNode;
};

}  // namespace

TrainResult replay_step(const Topology& topology, const StepGraph& graph,
                        const DagOptions& options) {
  const StepDag dag = build_dag(topology, graph, options);
  StepReplay first(topology, graph, dag, options, {});
  TrainResult result = first.run();
  // Steps run back to back: on shaped links the second step starts with what the first left
  // in the buckets, and stands for the loop (full_replay.cc does the same for a call).
  if (!first.shaped()) return result;
  return StepReplay(topology, graph, dag, options, first.end_tokens()).run();
}

}  // namespace plait::sim::train
