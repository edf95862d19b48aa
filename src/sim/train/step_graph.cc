#include "sim/train/step_graph.h"

#include <algorithm>

#include "plait/error.h"

namespace plait::sim::train {

void StepGraph::compute(int rank, const std::string& label, double seconds) {
  auto [it, added] = label_ids_.try_emplace(label, static_cast<uint32_t>(labels.size()));
  if (added) labels.push_back(label);
  programs.at(rank).push_back({TaskKind::kCompute, it->second, -1, seconds});
}

void StepGraph::issue(int rank, int call) {
  programs.at(rank).push_back({TaskKind::kIssue, 0, call, 0});
}

void StepGraph::wait(int rank, int call) {
  programs.at(rank).push_back({TaskKind::kWait, 0, call, 0});
}

int StepGraph::add_call(Call call) {
  calls.push_back(std::move(call));
  return static_cast<int>(calls.size()) - 1;
}

namespace {

[[noreturn]] void bad(const std::string& what) { throw invalid_usage("sim train: " + what); }

std::string call_text(const StepGraph& g, int c) {
  return "call " + std::to_string(c) + " (" + g.calls[c].name + ")";
}

}  // namespace

bool bytes_are_blocks(coll::CollOp op) {
  return op == coll::CollOp::kAllgather || op == coll::CollOp::kReduceScatter ||
         op == coll::CollOp::kAlltoall || op == coll::CollOp::kGather ||
         op == coll::CollOp::kScatter;
}

void check(const StepGraph& g) {
  if (g.ranks < 1) bad("no ranks");
  if (static_cast<int>(g.programs.size()) != g.ranks)
    bad(std::to_string(g.programs.size()) + " programs for " + std::to_string(g.ranks) +
        " ranks");
  if (g.copies < 1) bad("copies of " + std::to_string(g.copies));
  if (!g.starts.empty() && static_cast<int>(g.starts.size()) != g.ranks)
    bad(std::to_string(g.starts.size()) + " start times for " + std::to_string(g.ranks) + " ranks");
  // By call: the position in `members` of each rank (-1: not a member), filled lazily.
  std::vector<std::unordered_map<int, int>> position(g.calls.size());
  for (size_t c = 0; c < g.calls.size(); ++c) {
    const Call& call = g.calls[c];
    const int n = static_cast<int>(call.members.size());
    if (call.p2p && (n != 2 || call.members[0] == call.members[1]))
      bad(call_text(g, c) + ": a message has a sender and a different receiver");
    if (n < 1) bad(call_text(g, c) + " has no members");
    for (int i = 0; i < n; ++i) {
      const int r = call.members[i];
      if (r < 0 || r >= g.ranks)
        bad(call_text(g, c) + ": member " + std::to_string(r) + " is not a rank of the " +
            std::to_string(g.ranks));
      if (!position[c].emplace(r, i).second)
        bad(call_text(g, c) + ": rank " + std::to_string(r) + " is a member twice");
    }
    if (!call.p2p && (call.root < 0 || call.root >= n))
      bad(call_text(g, c) + ": root " + std::to_string(call.root) + " is not a group rank");
    // A call of one member is among its copies.
    const int size = n > 1 ? n : call.copy_group > 0 ? call.copy_group : g.copies;
    if (n == 1 && (call.copy_stride < 1 || size * call.copy_stride > g.copies ||
                   g.copies % (size * call.copy_stride) != 0))
      bad(call_text(g, c) + ": " + std::to_string(size) + " copies " +
          std::to_string(call.copy_stride) + " apart do not tile the " +
          std::to_string(g.copies) + " copies of a rank");
    const uint64_t unit =
        dtype_size(call.dtype) * (!call.p2p && bytes_are_blocks(call.op) ? size : 1);
    if (call.bytes % unit != 0)
      bad(call_text(g, c) + ": " + std::to_string(call.bytes) + " bytes are not whole " +
          (unit == dtype_size(call.dtype) ? "elements" : "blocks of " + std::to_string(size) +
                                                            " members' elements"));
  }
  // 0: not issued yet, 1: issued, 2: waited for.
  std::vector<std::unordered_map<int, int>> state(g.calls.size());
  for (int r = 0; r < g.ranks; ++r) {
    for (const Task& t : g.programs[r]) {
      if (t.kind == TaskKind::kCompute) {
        if (!(t.seconds >= 0)) bad("rank " + std::to_string(r) + ": a compute task of " +
                                   std::to_string(t.seconds) + " s");
        continue;
      }
      if (t.call < 0 || t.call >= static_cast<int>(g.calls.size()))
        bad("rank " + std::to_string(r) + " names call " + std::to_string(t.call) + " of " +
            std::to_string(g.calls.size()));
      if (!position[t.call].count(r))
        bad("rank " + std::to_string(r) + " is not a member of " + call_text(g, t.call));
      int& s = state[t.call][r];
      if (t.kind == TaskKind::kIssue) {
        if (s != 0) bad("rank " + std::to_string(r) + " issues " + call_text(g, t.call) + " twice");
        s = 1;
      } else {
        if (s == 0)
          bad("rank " + std::to_string(r) + " waits for " + call_text(g, t.call) +
              " before it issues it");
        s = 2;
      }
    }
  }
  for (size_t c = 0; c < g.calls.size(); ++c)
    for (int r : g.calls[c].members)
      if (!state[c].count(r))
        bad("rank " + std::to_string(r) + " never issues " + call_text(g, static_cast<int>(c)) +
            ": its other members would wait for it forever");
}

}  // namespace plait::sim::train
