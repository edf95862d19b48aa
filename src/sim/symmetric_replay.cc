#include "sim/symmetric_replay.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <queue>

#include "coll/algorithms.h"
#include "sim/flow_network.h"

namespace plait::sim {
namespace {

using coll::Schedule;
using coll::Step;
using coll::StepId;
using coll::StepKind;

enum class Relabel : uint8_t { kShift, kXor };

int relabel(Relabel how, int peer, int rank, int p) {
  return how == Relabel::kShift ? (peer + rank) % p : peer ^ rank;
}

// Rank r's schedule is rank 0's with every peer relabelled.
bool relabelled(const Schedule& zero, const Schedule& other, Relabel how, int r, int p) {
  if (zero.steps.size() != other.steps.size() || zero.deps != other.deps) return false;
  for (size_t i = 0; i < zero.steps.size(); ++i) {
    const Step& a = zero.steps[i];
    const Step& b = other.steps[i];
    if (a.kind != b.kind || a.src.count != b.src.count || a.dst.count != b.dst.count ||
        a.dep_begin != b.dep_begin || a.dep_count != b.dep_count)
      return false;
    if ((a.peer < 0) != (b.peer < 0)) return false;
    if (a.peer >= 0 && b.peer != relabel(how, a.peer, r, p)) return false;
  }
  return true;
}

struct Message {
  double bytes = 0;
  int offset = 0;     // rank 0's peer: the copies go r -> relabel(offset, r)
  double head = 0;    // alpha + rank 0's copy's path latency
  double remaining = 0;
  double rate = 0;
  bool active = false;
};

struct State {
  uint32_t deps_left = 0;
  double ready = -1, done = -1;
  int message = -1;  // a send: its message; a receive: the send of rank 0 it pairs with
  bool arrived = false;
  double arrival = -1;
  StepId cause = UINT32_MAX;
  int rounds = 0;
};

class Symmetric {
 public:
  Symmetric(const Topology& t, const Placement& p, const Schedule& s, Relabel how,
            const SimParams& params, size_t elem)
      : topology_(t), p_(p.ranks), s_(s), how_(how), params_(params), elem_(elem),
        states_(s.steps.size()), dependents_(s.steps.size()) {
    for (StepId i = 0; i < s.steps.size(); ++i) {
      states_[i].deps_left = s.steps[i].dep_count;
      for (StepId d : s.deps_of(s.steps[i])) dependents_[d].push_back(i);
    }
  }

  // Pairs every receive with the send of rank 0 that stands for it: the k-th receive from q
  // is the k-th send of rank q to 0, which is rank 0's k-th send to the peer q's relabelling
  // maps to 0 (shift: p - q; xor: q). False if the counts or sizes do not match.
  bool pair() {
    std::map<int, std::vector<StepId>> sends;
    for (StepId i = 0; i < s_.steps.size(); ++i)
      if (s_.steps[i].kind == StepKind::kSend) {
        const Step& st = s_.steps[i];
        states_[i].message = static_cast<int>(messages_.size());
        send_step_.push_back(i);
        Message m;
        m.bytes = static_cast<double>(st.src.count * elem_);
        m.offset = st.peer;
        messages_.push_back(m);
        sends[st.peer].push_back(i);
      }
    std::map<int, size_t> taken;
    for (StepId j = 0; j < s_.steps.size(); ++j) {
      const Step& st = s_.steps[j];
      if (st.kind != StepKind::kRecv && st.kind != StepKind::kRecvReduce) continue;
      const int from = how_ == Relabel::kShift ? (p_ - st.peer) % p_ : st.peer;
      size_t& k = taken[from];
      auto it = sends.find(from);
      if (it == sends.end() || k >= it->second.size()) return false;
      const StepId send = it->second[k++];
      if (s_.steps[send].src.count != st.dst.count && st.kind == StepKind::kRecv) return false;
      states_[j].message = states_[send].message;
      receiver_of_[states_[send].message].push_back(j);
    }
    return true;
  }

  SymmetricReplay run() {
    for (StepId i = 0; i < s_.steps.size(); ++i)
      if (states_[i].deps_left == 0) events_.push({0.0, order_++, i, true, false});
    while (true) {
      double next_flow = FlowNetwork::kNever;
      for (int m : active_)
        next_flow = std::min(next_flow, now_ + messages_[m].remaining / messages_[m].rate);
      const double next_event = events_.empty() ? FlowNetwork::kNever : events_.top().time;
      if (next_flow == FlowNetwork::kNever && next_event == FlowNetwork::kNever) break;
      const double t = std::min(next_flow, next_event);
      drain(t);
      if (next_flow <= next_event) continue;  // drain() finished the flows due at t
      const Event e = events_.top();
      events_.pop();
      if (e.flow_start) start(static_cast<int>(e.step));
      else if (e.ready) ready(e.step);
      else done(e.step);
    }
    return result();
  }

 private:
  struct Event {
    double time;
    uint64_t order;
    StepId step;
    bool ready = true;
    bool flow_start = false;
    bool operator>(const Event& o) const {
      return time != o.time ? time > o.time : order > o.order;
    }
  };

  void push_done(StepId i, double t) { events_.push({t, order_++, i, false, false}); }

  void ready(StepId i) {
    State& s = states_[i];
    s.ready = now_;
    const Step& st = s_.steps[i];
    switch (st.kind) {
      case StepKind::kSend: {
        Message& m = messages_[s.message];
        m.head = params_.alpha_s + latency(m.offset);
        events_.push({now_ + m.head, order_++, static_cast<StepId>(s.message), false, true});
        return;
      }
      case StepKind::kRecv:
      case StepKind::kRecvReduce:
        return maybe_receive(i);
      case StepKind::kCopy:
      case StepKind::kReduce:
        return compute(i, now_, core_seconds(st, elem_, params_));
    }
  }

  // A local computation on rank 0's core from `at`, after whatever it runs already.
  void compute(StepId i, double at, double seconds) {
    if (cpu_free_ > at) {
      at = cpu_free_;
      states_[i].cause = last_cpu_;
    }
    cpu_free_ = at + seconds;
    last_cpu_ = i;
    push_done(i, at + seconds);
  }

  void maybe_receive(StepId j) {
    State& s = states_[j];
    if (s.ready < 0 || !s.arrived) return;
    double at = s.ready;
    if (s.arrival > at) at = s.arrival, s.cause = sender_step(s.message);
    s.rounds = std::max(s.rounds, states_[sender_step(s.message)].rounds + 1);
    if (s_.steps[j].kind == StepKind::kRecv) push_done(j, at);
    else compute(j, at, core_seconds(s_.steps[j], elem_, params_));
  }

  StepId sender_step(int message) const { return send_step_[message]; }

  void done(StepId i) {
    State& s = states_[i];
    s.done = now_;
    if (now_ > end_time_) end_time_ = now_, end_step_ = i;
    for (StepId d : dependents_[i]) {
      State& next = states_[d];
      next.cause = i;
      next.rounds = std::max(next.rounds, s.rounds);
      if (--next.deps_left == 0) events_.push({now_, order_++, d, true, false});
    }
  }

  void start(int message) {
    Message& m = messages_[message];
    m.remaining = m.bytes;
    m.active = true;
    active_.push_back(message);
    sent_by_offset_[m.offset] += m.bytes;
    rates();
  }

  // Moves to t: active messages drain; those done end their send and arrive at their
  // receives.
  void drain(double t) {
    const double dt = t - now_;
    now_ = t;
    std::vector<int> finished;
    for (int m : active_) {
      Message& msg = messages_[m];
      msg.remaining -= msg.rate * dt;
      if (msg.remaining <= 1e-6 || msg.remaining / msg.rate <= 1e-15) finished.push_back(m);
    }
    if (finished.empty()) return;
    for (int m : finished) {
      messages_[m].active = false;
      active_.erase(std::find(active_.begin(), active_.end(), m));
      push_done(sender_step(m), now_);
      for (StepId j : receiver_of_[m]) {
        states_[j].arrived = true;
        states_[j].arrival = now_;
        maybe_receive(j);
      }
    }
    rates();
  }

  // The longest path latency among an offset's copies (every rank waits for its own); copies
  // whose paths differ in latency (a ring on a fat tree) make the result inexact.
  double latency(int offset) {
    auto it = latency_.find(offset);
    if (it != latency_.end()) return it->second;
    double longest = 0, shortest = FlowNetwork::kNever;
    for (int r = 0; r < p_; ++r) {
      double l = 0;
      const std::vector<Path> paths = topology_.route(r, relabel(how_, offset, r, p_), 0);
      for (int link : paths[0].links) l += topology_.links()[link].latency_s;
      longest = std::max(longest, l);
      shortest = std::min(shortest, l);
    }
    if (longest > shortest * (1 + 1e-9)) exact_ = false;
    return latency_.emplace(offset, longest).first->second;
  }

  // The messages in flight and their copies, solved max-min once per set of offsets.
  void rates() {
    if (active_.empty()) return;
    std::vector<int> key;
    for (int m : active_) key.push_back(messages_[m].offset);
    std::sort(key.begin(), key.end());
    auto it = cache_.find(key);
    if (it == cache_.end()) it = cache_.emplace(key, solve(key)).first;
    for (int m : active_) {
      const size_t pos = std::lower_bound(key.begin(), key.end(), messages_[m].offset) - key.begin();
      messages_[m].rate = it->second[pos];
    }
  }

  // Every copy of every offset in `key` (one message per entry) as flows; each entry's rate is
  // its slowest copy's (a copy over several paths goes at its slowest path's rate / share).
  std::vector<double> solve(const std::vector<int>& key) {
    std::vector<double> caps;
    for (const Link& l : topology_.links()) caps.push_back(l.bytes_per_s);
    FlowNetwork net(caps);
    struct Sub {
      int flow;
      double share;
    };
    // Per entry, per copy: its subflows (one per path).
    std::vector<std::vector<std::vector<Sub>>> subs(key.size(), std::vector<std::vector<Sub>>(p_));
    for (size_t e = 0; e < key.size(); ++e)
      for (int r = 0; r < p_; ++r)
        for (const Path& path : topology_.route(r, relabel(how_, key[e], r, p_),
                                                static_cast<uint64_t>(e) * p_ + r))
          subs[e][r].push_back({net.add(1e9 * path.share, path.links), path.share});
    net.next_finish();  // solves
    std::vector<double> out(key.size());
    for (size_t e = 0; e < key.size(); ++e) {
      double slowest = FlowNetwork::kNever, fastest = 0;
      for (int r = 0; r < p_; ++r) {
        double copy = FlowNetwork::kNever;
        for (const Sub& sub : subs[e][r]) copy = std::min(copy, net.rate(sub.flow) / sub.share);
        slowest = std::min(slowest, copy);
        fastest = std::max(fastest, copy);
      }
      if (fastest > slowest * (1 + 1e-9)) exact_ = false;
      out[e] = slowest;
    }
    return out;
  }

  SymmetricReplay result() {
    SymmetricReplay out;
    out.exact = exact_;
    out.relabelling = how_ == Relabel::kShift ? "shift" : "xor";
    ReplayResult& r = out.result;
    r.time_s = end_time_;
    r.messages = messages_.size() * static_cast<size_t>(p_);
    double sent = 0;
    for (const Message& m : messages_) sent += m.bytes;
    r.network_bytes = sent * p_;
    r.sent_messages.assign(p_, messages_.size());
    r.sent_bytes.assign(p_, sent);
    for (const State& s : states_) r.rounds = std::max(r.rounds, s.rounds);
    r.link_bytes.assign(topology_.links().size(), 0);
    for (const auto& [offset, bytes] : sent_by_offset_)
      for (int rank = 0; rank < p_; ++rank)
        for (const Path& path : topology_.route(rank, relabel(how_, offset, rank, p_), 0))
          for (int l : path.links) r.link_bytes[l] += bytes * path.share;
    find_bottleneck(topology_, &r);
    for (StepId i = end_step_; i != UINT32_MAX && r.critical_path.size() < 64;
         i = states_[i].cause) {
      const Step& st = s_.steps[i];
      char line[160];
      std::snprintf(line, sizeof line, "rank 0 step %u %s%s%s done at %.1f us (every rank alike)",
                    i, std::string(coll::to_string(st.kind)).c_str(),
                    st.peer < 0 ? "" : st.kind == StepKind::kSend ? " to " : " from ",
                    st.peer < 0 ? "" : std::to_string(st.peer).c_str(), states_[i].done * 1e6);
      r.critical_path.push_back(line);
    }
    return out;
  }

  const Topology& topology_;
  const int p_;
  const Schedule& s_;
  const Relabel how_;
  const SimParams params_;
  const size_t elem_;
  std::vector<State> states_;
  std::vector<std::vector<StepId>> dependents_;
  std::vector<Message> messages_;
  std::vector<StepId> send_step_;  // by message
  std::map<int, std::vector<StepId>> receiver_of_;
  std::vector<int> active_;
  std::map<std::vector<int>, std::vector<double>> cache_;
  std::map<int, double> sent_by_offset_;
  std::map<int, double> latency_;  // by offset: latency()
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  uint64_t order_ = 0;
  double now_ = 0;
  double cpu_free_ = 0;
  StepId last_cpu_ = UINT32_MAX;
  double end_time_ = 0;
  StepId end_step_ = UINT32_MAX;
  bool exact_ = true;
};

}  // namespace

std::optional<SymmetricReplay> replay_symmetric(const Topology& topology,
                                                const Placement& placement,
                                                const coll::CollArgs& args,
                                                const coll::AlgorithmInfo& info,
                                                const SimParams& params) {
  const int p = placement.ranks;
  if (p < 2 || placement.ranks_per_host != 1 || p > topology.hosts()) return std::nullopt;
  for (const Link& l : topology.links())
    if (l.burst_bytes > 0) return std::nullopt;  // a bucket's state is not a function of the set
  coll::CollArgs a = args;
  a.size = p;
  a.rank = 0;
  const Schedule zero = info.build(a);
  std::vector<int> samples = {1, 2, 3, p / 2, p / 2 + 1, p / 3, p - 1};
  std::sort(samples.begin(), samples.end());
  samples.erase(std::unique(samples.begin(), samples.end()), samples.end());
  std::optional<Relabel> how;
  for (Relabel candidate : {Relabel::kShift, Relabel::kXor}) {
    if (candidate == Relabel::kXor && (p & (p - 1)) != 0) continue;
    bool all = true;
    for (int r : samples) {
      if (r <= 0 || r >= p) continue;
      a.rank = r;
      if (!relabelled(zero, info.build(a), candidate, r, p)) {
        all = false;
        break;
      }
    }
    if (all) {
      how = candidate;
      break;
    }
  }
  if (!how) return std::nullopt;
  Symmetric replay(topology, placement, zero, *how, params, dtype_size(args.dtype));
  if (!replay.pair()) return std::nullopt;
  return replay.run();
}

}  // namespace plait::sim
