#include "sim/symmetric_replay.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <queue>

#include "coll/select/algorithms.h"
#include "sim/flow_network.h"
#include "sim/pair_fifo.h"
#include "sim/relabelling.h"

namespace plait::sim {
namespace {

using coll::Schedule;
using coll::Step;
using coll::StepId;
using coll::StepKind;

enum class Relabel : uint8_t { kShift, kXor };

// Rank `peer` of a representative's schedule seen from the copy `amount` away (a multiple of
// the ranks per host, so that hosts map onto hosts).
int relabel(Relabel how, int peer, int amount, int p) {
  return how == Relabel::kShift ? (peer + amount) % p : peer ^ amount;
}

// Rank r's representative (the rank of host 0 with its place on its host) and how far r is
// from it.
std::pair<int, int> representative_of(Relabel how, int r, int reps) {
  const int rep = how == Relabel::kShift ? r % reps : r & (reps - 1);
  return {rep, r - rep};
}

// `other` is `rep`'s schedule with every peer relabelled by `amount`.
bool relabelled(const Schedule& rep, const Schedule& other, Relabel how, int amount, int p) {
  return sim::relabelled(rep, other, [&](int peer) { return relabel(how, peer, amount, p); });
}

struct Message {
  double bytes = 0;
  int rep = 0;        // the representative that sends it
  int peer = 0;       // its peer there: the copies go relabel(rep, c) -> relabel(peer, c)
  double head = 0;    // alpha + the longest copy's path latency
  double remaining = 0;
  double rate = 0;
  bool active = false;
};

struct State {
  uint32_t deps_left = 0;
  double ready = -1, done = -1;
  int message = -1;  // a send: its message; a receive: the send it pairs with
  bool arrived = false;
  double arrival = -1;
  int cause = -1;    // index into the representatives' steps (ref()), -1: none
  int rounds = 0;
};

class Symmetric {
 public:
  // `reps`: the schedules of ranks 0 .. R-1 (R = ranks per host), which stand for every rank.
  Symmetric(const Topology& t, const Placement& p, std::vector<Schedule> reps, Relabel how,
            const SimParams& params, size_t elem)
      : topology_(t), placement_(p), p_(p.ranks), reps_(std::move(reps)), how_(how),
        params_(params), elem_(elem), cpu_free_(reps_.size(), 0),
        last_cpu_(reps_.size(), -1) {
    for (const Schedule& s : reps_) {
      base_.push_back(static_cast<int>(states_.size()));
      for (StepId i = 0; i < s.steps.size(); ++i) {
        State st;
        st.deps_left = s.steps[i].dep_count;
        states_.push_back(st);
        rep_of_.push_back(static_cast<int>(base_.size()) - 1);
      }
    }
    dependents_.resize(states_.size());
    for (size_t r = 0; r < reps_.size(); ++r)
      for (StepId i = 0; i < reps_[r].steps.size(); ++i)
        for (StepId d : reps_[r].deps_of(reps_[r].steps[i]))
          dependents_[base_[r] + static_cast<int>(d)].push_back(base_[r] + static_cast<int>(i));
  }

  // Pairs every receive with the send that stands for it: representative i's k-th receive from
  // q is the k-th send of q to i, which is q's representative's k-th send to i relabelled
  // back by q's distance from it. False if the counts or sizes do not match.
  bool pair() {
    std::map<std::pair<int, int>, std::vector<int>> sends;  // (rep, peer) -> global steps
    for (int g = 0; g < static_cast<int>(states_.size()); ++g) {
      const Step& st = step(g);
      if (st.kind != StepKind::kSend) continue;
      states_[g].message = static_cast<int>(messages_.size());
      send_step_.push_back(g);
      Message m;
      m.bytes = static_cast<double>(st.src.count * elem_);
      m.rep = rep_of_[g];
      m.peer = st.peer;
      messages_.push_back(m);
      sends[{m.rep, st.peer}].push_back(g);
    }
    receiver_of_.resize(messages_.size());
    std::map<std::pair<int, int>, size_t> taken;
    for (int g = 0; g < static_cast<int>(states_.size()); ++g) {
      const Step& st = step(g);
      if (st.kind != StepKind::kRecv && st.kind != StepKind::kRecvReduce) continue;
      const auto [sender_rep, distance] = representative_of(how_, st.peer, reps());
      const int to = how_ == Relabel::kShift ? (rep_of_[g] - distance % p_ + p_) % p_
                                             : rep_of_[g] ^ distance;
      const std::pair<int, int> key{sender_rep, to};
      size_t& k = taken[key];
      auto it = sends.find(key);
      if (it == sends.end() || k >= it->second.size()) return false;
      const int send = it->second[k++];
      if (step(send).src.count != st.dst.count && st.kind == StepKind::kRecv) return false;
      states_[g].message = states_[send].message;
      receiver_of_[states_[send].message].push_back(g);
    }
    return true;
  }

  SymmetricReplay run() {
    for (int g = 0; g < static_cast<int>(states_.size()); ++g)
      if (states_[g].deps_left == 0) events_.push({0.0, order_++, g, true, false});
    while (true) {
      // Everything due now first, then the rates once for the messages in flight after it.
      if (!events_.empty() && events_.top().time <= now_) {
        const Event e = events_.top();
        events_.pop();
        if (e.flow_start) start(e.id);
        else if (e.ready) ready(e.id);
        else done(e.id);
        continue;
      }
      if (stale_) rates(), stale_ = false;
      double next_flow = FlowNetwork::kNever;
      for (int m : active_)
        next_flow = std::min(next_flow, now_ + messages_[m].remaining / messages_[m].rate);
      const double next_event = events_.empty() ? FlowNetwork::kNever : events_.top().time;
      if (next_flow == FlowNetwork::kNever && next_event == FlowNetwork::kNever) break;
      drain(std::min(next_flow, next_event));  // the events due then: at the top of the loop
    }
    return result();
  }

 private:
  struct Event {
    double time;
    uint64_t order;
    int id;  // a step (global index), or a message for flow_start
    bool ready = true;
    bool flow_start = false;
    bool operator>(const Event& o) const {
      return time != o.time ? time > o.time : order > o.order;
    }
  };

  int reps() const { return static_cast<int>(reps_.size()); }
  const Step& step(int g) const {
    const int r = rep_of_[g];
    return reps_[r].steps[static_cast<size_t>(g - base_[r])];
  }
  int copies() const { return p_ / reps(); }
  int rank_of(int rank, int copy) const { return relabel(how_, rank, copy * reps(), p_); }
  int host(int rank) const { return placement_.host_of(rank); }

  void push_done(int g, double t) { events_.push({t, order_++, g, false, false}); }

  void ready(int g) {
    State& s = states_[g];
    s.ready = now_;
    const Step& st = step(g);
    switch (st.kind) {
      case StepKind::kSend: {
        Message& m = messages_[s.message];
        m.head = (host(m.rep) == host(m.peer) ? params_.intra_alpha_s : params_.alpha_s) +
                 latency(m.rep, m.peer);
        events_.push({now_ + m.head, order_++, s.message, false, true});
        return;
      }
      case StepKind::kRecv:
      case StepKind::kRecvReduce:
        return maybe_receive(g);
      case StepKind::kCopy:
      case StepKind::kReduce:
        return compute(g, now_, core_seconds(st, elem_, params_));
    }
  }

  // A local computation on its representative's core from `at`, after what that runs already.
  void compute(int g, double at, double seconds) {
    const int r = rep_of_[g];
    if (cpu_free_[r] > at) {
      at = cpu_free_[r];
      states_[g].cause = last_cpu_[r];
    }
    cpu_free_[r] = at + seconds;
    last_cpu_[r] = g;
    push_done(g, at + seconds);
  }

  void maybe_receive(int g) {
    State& s = states_[g];
    if (s.ready < 0 || !s.arrived) return;
    double at = s.ready;
    if (s.arrival > at) at = s.arrival, s.cause = send_step_[s.message];
    // Rounds of data: a token (ScheduleBuilder::handshake) orders rounds, it is not one.
    s.rounds = std::max(s.rounds, states_[send_step_[s.message]].rounds +
                                      (messages_[s.message].bytes > 0 ? 1 : 0));
    if (step(g).kind == StepKind::kRecv) push_done(g, at);
    else compute(g, at, core_seconds(step(g), elem_, params_));
  }

  void done(int g) {
    State& s = states_[g];
    s.done = now_;
    if (now_ > end_time_) end_time_ = now_, end_step_ = g;
    for (int d : dependents_[g]) {
      State& next = states_[d];
      next.cause = g;
      next.rounds = std::max(next.rounds, s.rounds);
      if (--next.deps_left == 0) events_.push({now_, order_++, d, true, false});
    }
  }

  // A message whose pair is sending another waits for it (pair_fifo.h).
  void start(int message) {
    const Message& m = messages_[message];
    if (!fifo_.admit(PairFifo::pair(m.rep, m.peer), message)) return;
    begin(message);
    stale_ = true;
  }

  void begin(int message) {
    Message& m = messages_[message];
    m.remaining = m.bytes;
    m.active = true;
    active_.push_back(message);
    sent_by_pair_[{m.rep, m.peer}] += m.bytes;
  }

  // Moves to t: active messages drain; those done end their send and arrive at their
  // receives. A message is done once its end (computed as run() computes it) has come: late
  // in a long call t has too few bits for the last bytes of a fast message, which then never
  // drained and was asked for again and again.
  void drain(double t) {
    const double dt = t - now_;
    std::vector<int> finished;
    for (int m : active_) {
      Message& msg = messages_[m];
      const double end = now_ + msg.remaining / msg.rate;
      msg.remaining -= msg.rate * dt;
      if (end <= t || msg.remaining <= 1e-6 || msg.remaining / msg.rate <= 1e-15)
        finished.push_back(m);
    }
    now_ = t;
    if (finished.empty()) return;
    for (int m : finished) {
      messages_[m].active = false;
      active_.erase(std::find(active_.begin(), active_.end(), m));
      push_done(send_step_[m], now_);
      for (int g : receiver_of_[m]) {
        states_[g].arrived = true;
        states_[g].arrival = now_;
        maybe_receive(g);
      }
      const int next = fifo_.release(PairFifo::pair(messages_[m].rep, messages_[m].peer));
      if (next >= 0) begin(next);
    }
    stale_ = true;
  }

  // The paths of copy c of the messages from representative `rep` to `peer` (none between two
  // ranks of one host: its memory path). The ECMP hash is the copy's own: the same whatever
  // else is in flight, and the same for the rates, the latency and the bytes each link carried.
  std::vector<Path> paths(int rep, int peer, int c) const {
    const int from = rank_of(rep, c), to = rank_of(peer, c);
    if (host(from) == host(to)) return {};
    const uint64_t seed = (static_cast<uint64_t>(rep) * static_cast<uint64_t>(p_) +
                           static_cast<uint64_t>(peer)) * static_cast<uint64_t>(copies()) +
                          static_cast<uint64_t>(c);
    return topology_.route(host(from), host(to), seed);
  }

  // The longest path latency among a message's copies (every rank waits for its own); copies
  // whose paths differ in latency (a ring on a fat tree) make the result inexact.
  double latency(int rep, int peer) {
    auto it = latency_.find({rep, peer});
    if (it != latency_.end()) return it->second;
    double longest = 0, shortest = FlowNetwork::kNever;
    for (int c = 0; c < copies(); ++c) {
      double l = 0;
      const std::vector<Path> ps = paths(rep, peer, c);
      if (!ps.empty())
        for (int link : ps[0].links) l += topology_.links()[link].latency_s;
      longest = std::max(longest, l);
      shortest = std::min(shortest, l);
    }
    if (longest > shortest * (1 + 1e-9)) exact_ = false;
    return latency_.emplace(std::pair{rep, peer}, longest).first->second;
  }

  // The messages in flight and their copies, solved max-min once per set of (sender, peer).
  void rates() {
    if (active_.empty()) return;
    std::vector<std::pair<int, int>> key;
    for (int m : active_) key.push_back({messages_[m].rep, messages_[m].peer});
    std::sort(key.begin(), key.end());
    auto it = cache_.find(key);
    if (it == cache_.end()) it = cache_.emplace(key, solve(key)).first;
    for (int m : active_) {
      const size_t pos = std::lower_bound(key.begin(), key.end(),
                                          std::pair{messages_[m].rep, messages_[m].peer}) -
                         key.begin();
      messages_[m].rate = it->second[pos];
    }
  }

  // Every copy of every entry of `key` (one message per entry) as flows; each entry's rate is
  // its slowest copy's (a copy over several paths goes at its slowest path's rate / share).
  std::vector<double> solve(const std::vector<std::pair<int, int>>& key) {
    std::vector<double> caps;
    for (const Link& l : topology_.links()) caps.push_back(l.bytes_per_s);
    FlowNetwork net(caps);
    std::map<int, int> memory;  // host -> its memory path's resource
    struct Sub {
      int flow;
      double share;
    };
    const int n = copies();
    // Per entry, per copy: its subflows (one per path).
    std::vector<std::vector<std::vector<Sub>>> subs(key.size(), std::vector<std::vector<Sub>>(n));
    for (size_t e = 0; e < key.size(); ++e)
      for (int c = 0; c < n; ++c) {
        const int from = rank_of(key[e].first, c), to = rank_of(key[e].second, c);
        if (host(from) == host(to)) {
          auto [slot, fresh] = memory.emplace(host(from), 0);
          if (fresh) slot->second = net.add_link(params_.intra_bytes_per_s);
          subs[e][c].push_back({net.add(1e9, {slot->second}), 1.0});
          continue;
        }
        for (const Path& path : paths(key[e].first, key[e].second, c))
          subs[e][c].push_back({net.add(1e9 * path.share, path.links), path.share});
      }
    net.next_finish();  // solves
    std::vector<double> out(key.size());
    for (size_t e = 0; e < key.size(); ++e) {
      double slowest = FlowNetwork::kNever, fastest = 0;
      for (int c = 0; c < n; ++c) {
        double copy = FlowNetwork::kNever;
        for (const Sub& sub : subs[e][c]) copy = std::min(copy, net.rate(sub.flow) / sub.share);
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
    r.messages = messages_.size() * static_cast<size_t>(copies());
    std::vector<size_t> count(reps(), 0);
    std::vector<double> bytes(reps(), 0);
    for (const Message& m : messages_) {
      ++count[m.rep];
      bytes[m.rep] += m.bytes;
      if (host(m.rep) != host(m.peer)) r.network_bytes += m.bytes * copies();
    }
    r.sent_messages.resize(p_);
    r.sent_bytes.resize(p_);
    for (int rank = 0; rank < p_; ++rank) {
      const int rep = representative_of(how_, rank, reps()).first;
      r.sent_messages[rank] = count[rep];
      r.sent_bytes[rank] = bytes[rep];
    }
    for (const State& s : states_) r.rounds = std::max(r.rounds, s.rounds);
    r.link_bytes.assign(topology_.links().size(), 0);
    for (const auto& [pair, sent] : sent_by_pair_)
      for (int c = 0; c < copies(); ++c)
        for (const Path& path : paths(pair.first, pair.second, c))
          for (int l : path.links) r.link_bytes[l] += sent * path.share;
    find_bottleneck(topology_, &r);
    for (int g = end_step_; g >= 0 && r.critical_path.size() < 64; g = states_[g].cause) {
      const Step& st = step(g);
      char line[160];
      std::snprintf(line, sizeof line, "rank %d step %d %s%s%s done at %.1f us (every %s alike)",
                    rep_of_[g], g - base_[rep_of_[g]],
                    std::string(coll::to_string(st.kind)).c_str(),
                    st.peer < 0 ? "" : st.kind == StepKind::kSend ? " to " : " from ",
                    st.peer < 0 ? "" : std::to_string(st.peer).c_str(), states_[g].done * 1e6,
                    reps() == 1 ? "rank" : "host");
      r.critical_path.push_back(line);
    }
    return out;
  }

  const Topology& topology_;
  const Placement placement_;
  const int p_;
  const std::vector<Schedule> reps_;
  const Relabel how_;
  const SimParams params_;
  const size_t elem_;
  std::vector<int> base_;    // by representative: its first step's global index
  std::vector<int> rep_of_;  // by global step
  std::vector<State> states_;
  std::vector<std::vector<int>> dependents_;
  std::vector<Message> messages_;
  std::vector<int> send_step_;  // by message
  std::vector<std::vector<int>> receiver_of_;  // by message
  PairFifo fifo_;
  bool stale_ = false;  // the set of messages in flight changed since rates()
  std::vector<int> active_;
  std::map<std::vector<std::pair<int, int>>, std::vector<double>> cache_;
  std::map<std::pair<int, int>, double> sent_by_pair_;
  std::map<std::pair<int, int>, double> latency_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  uint64_t order_ = 0;
  double now_ = 0;
  std::vector<double> cpu_free_;
  std::vector<int> last_cpu_;
  double end_time_ = 0;
  int end_step_ = -1;
  bool exact_ = true;
};

}  // namespace

std::optional<SymmetricReplay> replay_symmetric(const Topology& topology,
                                                const Placement& placement,
                                                const coll::CollArgs& args,
                                                const coll::AlgorithmInfo& info,
                                                const SimParams& params) {
  const int p = placement.ranks;
  const int reps = placement.ranks_per_host;
  if (p < 2 || reps < 1 || p % reps != 0 || p / reps > topology.hosts()) return std::nullopt;
  for (const Link& l : topology.links())
    // A bucket's state is not a function of the set of flows; a FIFO link's order is a
    // function of the posting order of every rank, not of rank 0's.
    if (l.burst_bytes > 0 || l.fifo) return std::nullopt;
  coll::CollArgs a = args;
  a.size = p;
  std::vector<Schedule> schedules;
  for (int r = 0; r < reps; ++r) {
    a.rank = r;
    schedules.push_back(info.build(a));
  }
  std::vector<int> samples = {1, 2, 3, reps, reps + 1, 2 * reps - 1, p / 2, p / 2 + 1,
                              p / 3, p - reps, p - 1};
  std::sort(samples.begin(), samples.end());
  samples.erase(std::unique(samples.begin(), samples.end()), samples.end());
  std::optional<Relabel> how;
  for (Relabel candidate : {Relabel::kShift, Relabel::kXor}) {
    if (candidate == Relabel::kXor && ((p & (p - 1)) != 0 || (reps & (reps - 1)) != 0)) continue;
    bool all = true;
    for (int r : samples) {
      if (r < reps || r >= p) continue;
      a.rank = r;
      const auto [rep, distance] = representative_of(candidate, r, reps);
      if (!relabelled(schedules[rep], info.build(a), candidate, distance, p)) {
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
  Symmetric replay(topology, placement, std::move(schedules), *how, params,
                   dtype_size(args.dtype));
  if (!replay.pair()) return std::nullopt;
  return replay.run();
}

}  // namespace plait::sim
