#include "sim/train/step_dag.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "coll/select/algorithms.h"
#include "coll/select/select.h"
#include "core/config.h"
#include "plait/error.h"
#include "sim/contention.h"
#include "sim/relabelling.h"

namespace plait::sim::train {
namespace {

using coll::StepKind;

class DagBuilder {
 public:
  DagBuilder(const Topology& t, const StepGraph& g, const DagOptions& o)
      : topology_(t), graph_(g), options_(o) {}

  StepDag build() {
    check(graph_);
    const int ranks = graph_.ranks * graph_.copies;
    const int hosts = (ranks + options_.placement.ranks_per_host - 1) /
                      options_.placement.ranks_per_host;
    if (hosts > topology_.hosts())
      throw invalid_usage("sim train: " + std::to_string(ranks) + " ranks at " +
                          std::to_string(options_.placement.ranks_per_host) + " a host need " +
                          std::to_string(hosts) + " hosts; " + topology_.spec() + " has " +
                          std::to_string(topology_.hosts()));
    dag_.ends.resize(graph_.calls.size());
    issued_.resize(graph_.calls.size());
    for (size_t c = 0; c < graph_.calls.size(); ++c) {
      dag_.ends[c].resize(graph_.calls[c].members.size());
      issued_[c].assign(graph_.calls[c].members.size(), kNoNode);
    }
    after_.resize(graph_.calls.size());
    load_programs();
    dag_.algorithms.resize(graph_.calls.size());
    dag_.symmetry.assign(graph_.calls.size(), Symmetry::kNone);
    for (size_t c = 0; c < graph_.calls.size(); ++c) load_call(static_cast<int>(c));
    for (const auto& [wait, c, pos] : waits_) edge(dag_.ends[c][pos].done, wait);
    // A group's calls run in the order each member issues them.
    for (size_t c = 0; c < graph_.calls.size(); ++c)
      for (const auto& [pos, before, before_pos] : after_[c])
        edge(dag_.ends[before][before_pos].done, dag_.ends[c][pos].gate);
    turn_edges_round();
    return std::move(dag_);
  }

 private:
  int host(int rank) const { return options_.placement.host_of(rank * graph_.copies); }

  // Step j of call c's schedule as a node: its kind, bytes and core time (rank and peers are
  // the caller's to set).
  Node step_node(const coll::Step& st, size_t elem, int c, coll::StepId j) const {
    Node n;
    n.call = c;
    n.index = j;
    switch (st.kind) {
      case StepKind::kSend:
        n.kind = NodeKind::kSend;
        n.bytes = static_cast<double>(st.src.count * elem);
        break;
      case StepKind::kRecv: n.kind = NodeKind::kRecv; break;
      case StepKind::kRecvReduce: n.kind = NodeKind::kRecvReduce; break;
      default: n.kind = NodeKind::kLocal; break;
    }
    n.seconds = core_seconds(st, elem, options_.sim);
    return n;
  }

  NodeId add(Node n) {
    dag_.nodes.push_back(n);
    dag_.deps.push_back(0);
    return static_cast<NodeId>(dag_.nodes.size() - 1);
  }
  void edge(NodeId from, NodeId to) {
    edges_.emplace_back(from, to);
    ++dag_.deps[to];
  }

  int position(int c, int rank) {
    auto& map = positions_[c];
    if (map.empty())
      for (size_t i = 0; i < graph_.calls[c].members.size(); ++i)
        map.emplace(graph_.calls[c].members[i], static_cast<int>(i));
    return map.at(rank);
  }

  void load_programs() {
    dag_.last_task.assign(graph_.ranks, kNoNode);
    for (int r = 0; r < graph_.ranks; ++r) {
      std::unordered_map<int, std::pair<int, int>> last_of_group;  // group -> (call, position)
      NodeId prev = kNoNode;
      for (size_t i = 0; i < graph_.programs[r].size(); ++i) {
        const Task& t = graph_.programs[r][i];
        Node n;
        n.kind = NodeKind::kTask;
        n.rank = r;
        n.call = t.call;
        n.index = static_cast<uint32_t>(i);
        n.seconds = t.kind == TaskKind::kCompute ? t.seconds : 0;
        const NodeId id = add(n);
        if (prev != kNoNode) edge(prev, id);
        prev = id;
        if (t.kind == TaskKind::kIssue) {
          const int pos = position(t.call, r);
          issued_[t.call][pos] = id;
          const int group = graph_.calls[t.call].group;
          if (group >= 0) {
            auto it = last_of_group.find(group);
            if (it != last_of_group.end())
              after_[t.call].emplace_back(pos, it->second.first, it->second.second);
            last_of_group[group] = {t.call, pos};
          }
        } else if (t.kind == TaskKind::kWait) {
          waits_.emplace_back(id, t.call, position(t.call, r));
        }
      }
      dag_.last_task[r] = prev;
    }
  }

  // The host of each of the call's group ranks: its members', or for a call of one member
  // among its copies (Call::copy_group), the first such set of copies'.
  std::vector<int> group_hosts(const Call& c) const {
    std::vector<int> out;
    if (c.members.size() > 1 || graph_.copies == 1) {
      for (int m : c.members) out.push_back(host(m));
      return out;
    }
    const int size = c.copy_group > 0 ? c.copy_group : graph_.copies;
    for (int k = 0; k < size; ++k)
      out.push_back(options_.placement.host_of(c.members[0] * graph_.copies + k * c.copy_stride));
    return out;
  }

  coll::CollArgs args_of(const Call& c) const {
    coll::CollArgs a;
    a.op = c.op;
    const std::vector<int> hosts_of = group_hosts(c);
    a.size = static_cast<int>(hosts_of.size());
    a.dtype = c.dtype;
    a.root = c.root;
    const size_t elem = dtype_size(c.dtype);
    a.count = c.bytes / elem / (bytes_are_blocks(c.op) ? a.size : 1);
    a.chunk_count = std::max<size_t>(1, options_.chunk_bytes / elem);
    if (std::set<int>(hosts_of.begin(), hosts_of.end()).size() > 1) a.host_of = hosts_of;
    return a;
  }

  // The cost model's pick, as a communicator of these members on this network makes it
  // (kept per shape: a step has many calls alike).
  const coll::AlgorithmInfo* pick(const Call& c, const coll::CollArgs& args) {
    const std::vector<int> hosts_of = group_hosts(c);
    const int h = static_cast<int>(std::set<int>(hosts_of.begin(), hosts_of.end()).size());
    const int per_host = (args.size + h - 1) / h;
    const auto key = std::make_tuple(static_cast<int>(c.op), c.bytes, args.size, h,
                                     static_cast<int>(c.dtype), c.root);
    auto it = picks_.find(key);
    if (it != picks_.end()) return it->second;
    const coll::Selection s = coll::select_algorithm(
        args, "", Config{}, model_params(options_.sim, topology_, h, per_host));
    picks_.emplace(key, s.info);
    return s.info;
  }

  void load_call(int c) {
    const Call& call = graph_.calls[c];
    std::vector<CallEnds>& ends = dag_.ends[c];
    for (size_t pos = 0; pos < call.members.size(); ++pos) {
      Node gate;
      gate.kind = NodeKind::kJoin;
      gate.rank = call.members[pos];
      gate.call = c;
      ends[pos].gate = add(gate);
      edge(issued_[c][pos], ends[pos].gate);
      ends[pos].done = add(gate);
    }
    std::map<std::pair<int, int>, std::vector<NodeId>> sends;  // (from, to): in step order
    std::vector<NodeId> recvs;
    if (call.p2p) {
      dag_.algorithms[c] = "p2p";
      Node send;
      send.kind = NodeKind::kSend;
      send.rank = call.members[0];
      send.peer = call.members[1];
      send.call = c;
      send.bytes = static_cast<double>(call.bytes);
      const NodeId s = add(send);
      Node recv = send;
      recv.kind = NodeKind::kRecv;
      recv.rank = call.members[1];
      recv.peer = call.members[0];
      const NodeId r = add(recv);
      edge(ends[0].gate, s);
      edge(s, ends[0].done);
      edge(ends[1].gate, r);
      edge(r, ends[1].done);
      sends[{send.rank, send.peer}].push_back(s);
      recvs.push_back(r);
    } else if (one_host(call)) {
      load_host_call(c);
      return;
    } else if (call.members.size() == 1 && graph_.copies > 1) {
      load_copies_call(c);
      return;
    } else {
      coll::CollArgs args = args_of(call);
      const coll::AlgorithmInfo* info = info_of(c, args);
      dag_.algorithms[c] = std::string(coll::to_string(info->algorithm));
      const size_t elem = dtype_size(call.dtype);
      for (size_t pos = 0; pos < call.members.size(); ++pos) {
        args.rank = static_cast<int>(pos);
        const coll::Schedule s = info->build(args);
        const NodeId base = static_cast<NodeId>(dag_.nodes.size());
        for (coll::StepId j = 0; j < s.steps.size(); ++j) {
          const coll::Step& st = s.steps[j];
          Node n = step_node(st, elem, c, j);
          n.rank = call.members[pos];
          n.peer = st.peer >= 0 ? call.members[st.peer] : -1;
          const NodeId id = add(n);
          if (n.kind == NodeKind::kSend) sends[{n.rank, n.peer}].push_back(id);
          if (n.kind == NodeKind::kRecv || n.kind == NodeKind::kRecvReduce) recvs.push_back(id);
          if (st.dep_count == 0) edge(ends[pos].gate, id);
          for (coll::StepId d : s.deps_of(st)) edge(base + d, id);
          edge(id, ends[pos].done);
        }
        if (s.steps.empty()) edge(ends[pos].gate, ends[pos].done);
      }
    }
    pair_messages(c, sends, recvs);
  }

  bool one_host(const Call& c) const {
    const std::vector<int> hosts_of = group_hosts(c);
    for (int h : hosts_of)
      if (h != hosts_of[0]) return false;
    return hosts_of.size() > 1;
  }

  const coll::AlgorithmInfo* info_of(int c, const coll::CollArgs& args) {
    const Call& call = graph_.calls[c];
    const coll::AlgorithmInfo* info = nullptr;
    if (call.chosen) {
      info = coll::find_algorithm(call.op, call.algorithm);
      if (!info || !info->build || (info->applies && !info->applies(args)))
        throw invalid_usage("sim train: call " + std::to_string(c) + " (" + call.name +
                            "): no " + std::string(coll::to_string(call.algorithm)) + " " +
                            std::string(coll::to_string(call.op)) + " of this shape");
    } else {
      info = pick(call, args);
    }
    if (!info->build)  // the segment algorithm has no schedule to replay
      throw invalid_usage("sim train: call " + std::to_string(c) + " (" + call.name + "): " +
                          std::string(coll::to_string(info->algorithm)) +
                          " is not a schedule; force another algorithm");
    return info;
  }

  // A call among a rank's copies across hosts: the schedule of its first copy (group rank 0),
  // each of whose messages stands for every copy's, as the call's symmetry maps it: copy q's
  // schedule is rank 0's with each peer p moved to p + q (a ring) or p ^ q (halving-doubling,
  // recursive doubling), checked on the copies where a ring or a hypercube turns.
  void load_copies_call(int c) {
    const Call& call = graph_.calls[c];
    coll::CollArgs args = args_of(call);
    const coll::AlgorithmInfo* info = info_of(c, args);
    dag_.algorithms[c] = std::string(coll::to_string(info->algorithm));
    const int n = args.size;
    args.rank = 0;
    const coll::Schedule first = info->build(args);
    auto maps = [&](Symmetry kind) {
      if (kind == Symmetry::kXor && (n & (n - 1)) != 0) return false;
      for (int q : {1, n / 2, n - 1}) {
        if (q <= 0 || q >= n) continue;
        args.rank = q;
        const coll::Schedule other = info->build(args);
        const bool same = relabelled(first, other, [&](int p) {
          return kind == Symmetry::kShift ? (p + q) % n : p ^ q;
        });
        if (!same) return false;
      }
      return true;
    };
    Symmetry kind = Symmetry::kEvery;
    for (Symmetry k : {Symmetry::kShift, Symmetry::kXor})
      if (kind == Symmetry::kEvery && maps(k)) kind = k;
    dag_.symmetry[c] = kind;
    if (kind == Symmetry::kEvery) {
      // Every group rank's steps on the one rank; its gate starts them all, its end waits
      // for them all (the slowest replica).
      std::map<std::pair<int, int>, std::vector<NodeId>> sends;
      std::vector<NodeId> recvs;
      for (int k = 0; k < n; ++k) {
        args.rank = k;
        load_group_rank(c, info->build(args), k, &sends, &recvs);
      }
      pair_messages(c, sends, recvs, /*by_group_rank=*/true);
      return;
    }
    std::map<std::pair<int, int>, std::vector<NodeId>> by_pair;
    std::vector<NodeId> recvs;
    load_group_rank(c, first, 0, &by_pair, &recvs);
    std::map<int, std::vector<NodeId>> sends;  // by group peer, in step order
    for (auto& [pair, ids] : by_pair) sends[pair.second] = std::move(ids);
    // Rank 0's k-th receive from q is q's k-th send to 0: by the symmetry, rank 0's k-th send
    // to the peer that maps to 0 under q's relabelling, moved.
    std::map<int, size_t> taken;
    for (NodeId r : recvs) {
      Node& recv = dag_.nodes[r];
      const int q = recv.group_peer;
      const int to = kind == Symmetry::kShift ? (n - q) % n : q;
      size_t& k = taken[to];
      if (k >= sends[to].size())
        throw invalid_usage("sim train: call " + std::to_string(c) + " (" + call.name +
                            "): its first rank receives more from " + std::to_string(q) +
                            " than the symmetry gives it");
      const NodeId sn = sends[to][k++];
      recv.message = dag_.nodes[sn].message = static_cast<int32_t>(dag_.messages.size());
      recv.bytes = dag_.nodes[sn].bytes;
      dag_.messages.push_back({sn, r});
    }
  }

  // Group rank k's steps of call c (among copies of its one member) on that member, between
  // its gate and its end; sends by (group rank, group peer).
  void load_group_rank(int c, const coll::Schedule& s, int k,
                       std::map<std::pair<int, int>, std::vector<NodeId>>* sends,
                       std::vector<NodeId>* recvs) {
    const Call& call = graph_.calls[c];
    const CallEnds ends = dag_.ends[c][0];
    const size_t elem = dtype_size(call.dtype);
    const NodeId base = static_cast<NodeId>(dag_.nodes.size());
    for (coll::StepId j = 0; j < s.steps.size(); ++j) {
      const coll::Step& st = s.steps[j];
      Node node = step_node(st, elem, c, j);
      node.rank = call.members[0];
      node.peer = st.peer >= 0 ? call.members[0] : -1;
      node.group_peer = st.peer;
      node.group_rank = k;
      const NodeId id = add(node);
      if (node.kind == NodeKind::kSend) (*sends)[{k, st.peer}].push_back(id);
      if (node.kind == NodeKind::kRecv || node.kind == NodeKind::kRecvReduce) recvs->push_back(id);
      if (st.dep_count == 0) edge(ends.gate, id);
      for (coll::StepId d : s.deps_of(st)) edge(base + d, id);
      edge(id, ends.done);
    }
    if (s.steps.empty()) edge(ends.gate, ends.done);
  }

  // One node for the call, after every member's gate and before every member's end.
  void load_host_call(int c) {
    const Call& call = graph_.calls[c];
    const coll::CollArgs args = args_of(call);
    const coll::AlgorithmInfo* info = info_of(c, args);
    dag_.algorithms[c] = std::string(coll::to_string(info->algorithm));
    const auto key = std::make_tuple(static_cast<int>(call.op), call.bytes, args.size,
                                     static_cast<int>(info->algorithm),
                                     static_cast<int>(call.dtype), call.root);
    auto [it, added] = host_call_seconds_.try_emplace(key, 0.0);
    if (added) {
      const Placement alone{.ranks = args.size, .ranks_per_host = args.size};
      it->second = replay(topology_, alone, args, info->algorithm, options_.sim).time_s;
    }
    Node body;
    body.kind = NodeKind::kHostCall;
    body.rank = call.members[0];
    body.call = c;
    body.seconds = it->second;
    const NodeId id = add(body);
    for (const CallEnds& e : dag_.ends[c]) {
      edge(e.gate, id);
      edge(id, e.done);
    }
  }

  // The k-th send from a to b within a call pairs with b's k-th receive from a.
  void pair_messages(int c, std::map<std::pair<int, int>, std::vector<NodeId>>& sends,
                     const std::vector<NodeId>& recvs, bool by_group_rank = false) {
    std::map<std::pair<int, int>, size_t> taken;
    for (NodeId r : recvs) {
      Node& recv = dag_.nodes[r];
      const auto key = by_group_rank ? std::make_pair(recv.group_peer, recv.group_rank)
                                     : std::make_pair(recv.peer, recv.rank);
      size_t& k = taken[key];
      const std::vector<NodeId>& from = sends[key];
      if (k >= from.size())
        throw invalid_usage("sim train: call " + std::to_string(c) + " (" +
                            graph_.calls[c].name + "): rank " + std::to_string(recv.rank) +
                            " receives more messages from " + std::to_string(recv.peer) +
                            " than it sends (a builder bug)");
      const NodeId s = from[k++];
      recv.message = dag_.nodes[s].message = static_cast<int32_t>(dag_.messages.size());
      recv.bytes = dag_.nodes[s].bytes;
      dag_.messages.push_back({s, r});
    }
  }

  void turn_edges_round() {
    const size_t n = dag_.nodes.size();
    dag_.dependents_at.assign(n + 1, 0);
    for (const auto& e : edges_) ++dag_.dependents_at[e.first + 1];
    for (size_t i = 1; i <= n; ++i) dag_.dependents_at[i] += dag_.dependents_at[i - 1];
    dag_.dependents.resize(edges_.size());
    std::vector<uint32_t> at(dag_.dependents_at.begin(), dag_.dependents_at.end() - 1);
    for (const auto& e : edges_) dag_.dependents[at[e.first]++] = e.second;
    edges_.clear();
    edges_.shrink_to_fit();
  }

  const Topology& topology_;
  const StepGraph& graph_;
  const DagOptions options_;
  StepDag dag_;
  std::vector<std::pair<NodeId, NodeId>> edges_;
  std::vector<std::vector<NodeId>> issued_;  // by call, parallel to members: the issue task
  // By call: (its position, the group's call before it there, that call's position).
  std::vector<std::vector<std::tuple<int, int, int>>> after_;
  std::vector<std::tuple<NodeId, int, int>> waits_;  // (wait task, call, position)
  std::unordered_map<int, std::unordered_map<int, int>> positions_;
  std::map<std::tuple<int, uint64_t, int, int, int, int>, const coll::AlgorithmInfo*> picks_;
  std::map<std::tuple<int, uint64_t, int, int, int, int>, double> host_call_seconds_;
};

}  // namespace

StepDag build_dag(const Topology& topology, const StepGraph& graph, const DagOptions& options) {
  return DagBuilder(topology, graph, options).build();
}

}  // namespace plait::sim::train
