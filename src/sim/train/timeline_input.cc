#include "sim/train/timeline_input.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

#include "coll/select/algorithms.h"
#include "plait/error.h"

namespace plait::sim::train {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what) {
  throw invalid_usage("sim train: timeline: " + what);
}

struct Span {
  std::string kind;
  double begin, end;  // seconds
};

struct Recorded {
  std::string op, group;
  std::vector<int> members;
  int peer = -1, tag = 0;  // p2p: the other end (global)
  uint64_t bytes = 0;
  std::string algorithm;
  double issued = 0;
  std::vector<std::pair<double, double>> waits;  // [begin, end)
};

struct RankRecord {
  std::vector<Span> spans;
  std::vector<std::pair<double, double>> steps;
  std::vector<Recorded> calls;
};

const std::map<std::string, coll::CollOp> kOps = {
    {"all_reduce", coll::CollOp::kAllreduce},
    {"all_reduce_coalesced", coll::CollOp::kAllreduce},
    {"barrier", coll::CollOp::kAllreduce},
    {"broadcast", coll::CollOp::kBroadcast},
    {"reduce", coll::CollOp::kReduce},
    {"all_gather", coll::CollOp::kAllgather},
    {"all_gather_coalesced", coll::CollOp::kAllgather},
    {"all_gather_into_tensor", coll::CollOp::kAllgather},
    {"all_gather_into_tensor_coalesced", coll::CollOp::kAllgather},
    {"reduce_scatter", coll::CollOp::kReduceScatter},
    {"reduce_scatter_tensor", coll::CollOp::kReduceScatter},
    {"reduce_scatter_tensor_coalesced", coll::CollOp::kReduceScatter},
    {"all_to_all", coll::CollOp::kAlltoall},
    {"gather", coll::CollOp::kGather},
    {"scatter", coll::CollOp::kScatter},
};

std::vector<RankRecord> load(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    bad(std::string("not JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array())
    bad("no \"traceEvents\": not a trace plait.torch.timeline wrote");
  std::vector<RankRecord> ranks;
  for (const json& e : j["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const int pid = e.value("pid", -1), tid = e.value("tid", -1);
    if (pid < 0 || pid > (1 << 20)) bad("an event of process " + std::to_string(pid));
    if (static_cast<size_t>(pid) >= ranks.size()) ranks.resize(pid + 1);
    const double ts = e.value("ts", 0.0) * 1e-6, dur = e.value("dur", 0.0) * 1e-6;
    RankRecord& r = ranks[pid];
    if (tid == 0) r.spans.push_back({e.value("name", ""), ts, ts + dur});
    if (tid == 4) r.steps.emplace_back(ts, ts + dur);
    if (tid != 1 && tid != 2) continue;
    const json& a = e.value("args", json::object());
    if (!a.contains("members") || !a.contains("issued") || !a.contains("waits"))
      bad("rank " + std::to_string(pid) + "'s " + e.value("name", "") +
          " has no members, issue time or waits: recorded before plait sim train read "
          "timelines (record it again)");
    Recorded c;
    c.op = e.value("name", "");
    c.group = a.value("group", "");
    c.members = a["members"].get<std::vector<int>>();
    c.peer = a.value("peer", -1);
    c.tag = a.value("tag", 0);
    c.bytes = a.value("bytes", uint64_t{0});
    c.algorithm = a.value("algorithm", "");
    c.issued = a["issued"].get<double>() * 1e-6;
    for (const json& w : a["waits"]) {
      const double b = w.at(0).get<double>() * 1e-6;
      c.waits.emplace_back(b, b + w.at(1).get<double>() * 1e-6);
    }
    r.calls.push_back(std::move(c));
  }
  if (ranks.empty()) bad("no ranks recorded");
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].steps.empty()) bad("rank " + std::to_string(r) + " recorded no step");
    std::sort(ranks[r].steps.begin(), ranks[r].steps.end());
    std::sort(ranks[r].spans.begin(), ranks[r].spans.end(),
              [](const Span& a, const Span& b) { return a.begin < b.begin; });
    std::stable_sort(ranks[r].calls.begin(), ranks[r].calls.end(),
                     [](const Recorded& a, const Recorded& b) { return a.issued < b.issued; });
  }
  return ranks;
}

class GraphWriter {
 public:
  explicit GraphWriter(int ranks) {
    g_.ranks = ranks;
    g_.programs.resize(ranks);
  }

  // Rank r's thread over [begin, end).
  void write_rank(int r, const RankRecord& rec, double begin, double end) {
    struct Mark {
      double t;
      int order;  // issues before waits at one time
      int call;
      double until;
    };
    std::vector<Mark> marks;
    std::map<std::string, int> nth;  // by group: its calls so far on this rank
    std::map<std::tuple<int, int, int>, int> nth_p2p;
    std::unordered_map<const Recorded*, int> ids;
    for (const Recorded& c : rec.calls) {
      if (c.issued < begin || c.issued >= end) continue;
      const int id = c.peer >= 0 || c.op == "send" || c.op == "recv" || c.op == "recvAnySource"
                         ? p2p(r, c, nth_p2p)
                         : collective(r, c, nth[c.group]++);
      marks.push_back({c.issued - begin, 0, id, 0});
      for (const auto& [b, e] : c.waits)
        if (b < end) marks.push_back({std::max(b, c.issued) - begin, 1, id, std::min(e, end) - begin});
    }
    std::stable_sort(marks.begin(), marks.end(), [](const Mark& a, const Mark& b) {
      return a.t != b.t ? a.t < b.t : a.order < b.order;
    });
    double cursor = 0;
    for (const Mark& m : marks) {
      if (m.t > cursor) busy(r, rec, begin, cursor, m.t);
      cursor = std::max(cursor, m.t);
      if (m.order == 0) {
        g_.issue(r, m.call);
      } else {
        g_.wait(r, m.call);
        cursor = std::max(cursor, m.until);
      }
    }
    if (end - begin > cursor) busy(r, rec, begin, cursor, end - begin);
  }

  StepGraph take() { return std::move(g_); }

 private:
  // The thread's own time in [from, to) (step-relative): compute in spans, host work between.
  void busy(int r, const RankRecord& rec, double begin, double from, double to) {
    double at = from;
    for (const Span& s : rec.spans) {
      const double b = std::max(s.begin - begin, at), e = std::min(s.end - begin, to);
      if (e <= b) continue;
      if (b > at) g_.compute(r, "host work", b - at);
      g_.compute(r, s.kind, e - b);
      at = e;
    }
    if (to > at) g_.compute(r, "host work", to - at);
  }

  int collective(int r, const Recorded& c, int k) {
    auto op = kOps.find(c.op);
    if (op == kOps.end()) bad("rank " + std::to_string(r) + ": no operation \"" + c.op + "\"");
    auto [it, added] = collectives_.try_emplace({c.group, k}, -1);
    if (!added) {
      const Call& call = g_.calls[it->second];
      if (call.op != op->second || call.bytes != (c.op == "barrier" ? 4 : c.bytes) ||
          call.members != c.members)
        bad("rank " + std::to_string(r) + "'s call " + std::to_string(k) + " of group " +
            c.group + " (" + c.op + ", " + std::to_string(c.bytes) + " bytes) is not what " +
            "rank " + std::to_string(call.members[0]) + " made there (" + call.name + ", " +
            std::to_string(call.bytes) + " bytes): the ranks' steps differ");
      return it->second;
    }
    Call call;
    call.name = c.op + " " + c.group + " #" + std::to_string(k);
    call.op = op->second;
    call.members = c.members;
    call.bytes = c.op == "barrier" ? 4 : c.bytes;
    const uint64_t blocks = bytes_are_blocks(call.op) ? c.members.size() : 1;
    call.dtype = call.bytes % (4 * blocks) == 0 ? DataType::kF32 : DataType::kU8;
    auto [gid, fresh] = groups_.try_emplace(c.group, static_cast<int>(groups_.size()));
    call.group = gid->second;
    coll::Algorithm a;
    if (coll::parse_algorithm(c.algorithm, &a))
      if (const coll::AlgorithmInfo* info = coll::find_algorithm(call.op, a); info && info->build)
        call.algorithm = a, call.chosen = true;
    it->second = g_.add_call(std::move(call));
    return it->second;
  }

  int p2p(int r, const Recorded& c, std::map<std::tuple<int, int, int>, int>& nth) {
    if (c.op == "recvAnySource" || c.peer < 0)
      bad("rank " + std::to_string(r) + ": a " + c.op + " from any source cannot be paired");
    const bool send = c.op == "send";
    const int from = send ? r : c.peer, to = send ? c.peer : r;
    const int k = nth[{c.peer, c.tag, send}]++;
    auto [it, added] = messages_.try_emplace({from, to, c.tag, k}, -1);
    if (!added) {
      Call& call = g_.calls[it->second];
      if (send) call.bytes = c.bytes;  // the sender's size is the message's
      return it->second;
    }
    Call call;
    call.name = "message " + std::to_string(from) + "->" + std::to_string(to) + " tag " +
                std::to_string(c.tag) + " #" + std::to_string(k);
    call.p2p = true;
    call.members = {from, to};
    call.bytes = c.bytes;
    call.dtype = DataType::kU8;
    it->second = g_.add_call(std::move(call));
    return it->second;
  }

  StepGraph g_;
  std::map<std::pair<std::string, int>, int> collectives_;
  std::map<std::tuple<int, int, int, int>, int> messages_;
  std::map<std::string, int> groups_;
};

}  // namespace

RecordedStep read_timeline(const std::string& text, int step) {
  const std::vector<RankRecord> ranks = load(text);
  RecordedStep out;
  out.steps = static_cast<int>(ranks[0].steps.size());
  for (const RankRecord& r : ranks) out.steps = std::min<int>(out.steps, r.steps.size());
  auto length = [&](int k) {
    double longest = 0;
    for (const RankRecord& r : ranks)
      longest = std::max(longest, r.steps[k].second - r.steps[k].first);
    return longest;
  };
  if (step < 0) {
    std::vector<std::pair<double, int>> by_length;
    for (int k = 0; k < out.steps; ++k) by_length.emplace_back(length(k), k);
    std::sort(by_length.begin(), by_length.end());
    step = by_length[(by_length.size() - 1) / 2].second;
  }
  if (step >= out.steps)
    bad("step " + std::to_string(step) + " of " + std::to_string(out.steps) + " recorded");
  out.step = step;
  // The step as every rank recorded it: each its own length, starting as late as it did.
  out.measured_s = 0;
  double first = ranks[0].steps[step].first;
  for (const RankRecord& r : ranks) first = std::min(first, r.steps[step].first);
  GraphWriter w(static_cast<int>(ranks.size()));
  for (size_t r = 0; r < ranks.size(); ++r)
    w.write_rank(static_cast<int>(r), ranks[r], ranks[r].steps[step].first,
                 ranks[r].steps[step].second);
  out.graph = w.take();
  for (const RankRecord& r : ranks) {
    out.graph.starts.push_back(r.steps[step].first - first);
    out.measured_s = std::max(out.measured_s, r.steps[step].second - r.steps[step].first);
  }
  check(out.graph);
  return out;
}

}  // namespace plait::sim::train
