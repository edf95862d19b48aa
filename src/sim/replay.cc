#include "sim/replay.h"

#include <algorithm>
#include <optional>
#include <cstdio>
#include <queue>
#include <unordered_map>

#include "coll/algorithms.h"
#include "plait/error.h"
#include "sim/flow_network.h"
#include "sim/pair_fifo.h"
#include "sim/schedule_size.h"
#include "sim/symmetric_replay.h"

namespace plait::sim {
namespace {

using coll::Schedule;
using coll::Step;
using coll::StepId;
using coll::StepKind;

struct StepRef {
  int rank = -1;
  StepId step = 0;
};

struct StepState {
  uint32_t deps_left = 0;
  double ready = -1;  // dependencies done
  double done = -1;
  int message = -1;   // kSend / kRecv / kRecvReduce: its message
  StepRef cause;      // what its start or end waited for last (the critical path)
  int rounds = 0;     // data messages on the longest chain of messages this step waited for
};

struct Message {
  StepRef send, recv;
  double bytes = 0;
  int subflows_left = 0;
  int first_flow = -1;  // its subflows' ids: first_flow .. first_flow + paths - 1
  int uplink = -1;      // the FIFO link it queues on (Link::fifo), or -1
  double arrived = -1;
};

enum class EventKind : uint8_t { kReady, kDone, kFlowStart };

struct Event {
  double time;
  uint64_t order;  // FIFO among equal times: runs are deterministic
  EventKind kind;
  StepRef ref;
  int message = -1;
  bool operator>(const Event& o) const {
    return time != o.time ? time > o.time : order > o.order;
  }
};

class Replay {
 public:
  // `tokens`: per link, its bucket's tokens at the start (empty: none).
  Replay(const Topology& t, const Placement& p, const coll::CollArgs& args,
         const coll::AlgorithmInfo& info, const SimParams& params,
         const std::vector<double>& tokens = {})
      : topology_(t), placement_(p), params_(params), elem_(dtype_size(args.dtype)),
        what_(std::string(coll::to_string(info.algorithm)) + " " +
              std::string(coll::to_string(info.op))),
        network_(capacities(t)) {
    const int n = p.ranks;
    schedules_.reserve(n);
    states_.resize(n);
    dependents_.resize(n);
    cpu_free_.assign(n, 0.0);
    last_cpu_.assign(n, StepRef{});
    for (int r = 0; r < n; ++r) {
      coll::CollArgs a = args;
      a.rank = r;
      schedules_.push_back(info.build(a));
      const Schedule& s = schedules_.back();
      states_[r].resize(s.steps.size());
      dependents_[r].resize(s.steps.size());
      for (StepId i = 0; i < s.steps.size(); ++i) {
        states_[r][i].deps_left = s.steps[i].dep_count;
        for (StepId d : s.deps_of(s.steps[i])) dependents_[r][d].push_back(i);
      }
    }
    match_messages();
    for (size_t l = 0; l < t.links().size(); ++l)
      if (t.links()[l].burst_bytes > 0)
        network_.set_bucket(static_cast<int>(l), t.links()[l].burst_bytes,
                            t.links()[l].peak_bytes_per_s, tokens.empty() ? 0 : tokens[l]);
  }

  // After run(): per link, its bucket's tokens when the call ended.
  std::vector<double> end_tokens() {
    network_.advance(std::max(network_.now(), end_.second));
    std::vector<double> out(topology_.links().size());
    for (size_t l = 0; l < out.size(); ++l) out[l] = network_.tokens(static_cast<int>(l));
    return out;
  }

  ReplayResult run() {
    for (int r = 0; r < placement_.ranks; ++r)
      for (StepId i = 0; i < schedules_[r].steps.size(); ++i)
        if (states_[r][i].deps_left == 0) push(0, EventKind::kReady, {r, i});
    while (true) {
      // Everything due now first: the rates are solved once for all the flows that start at
      // this instant (a tree's ranks post their first chunks together), not once per flow.
      if (!events_.empty() && events_.top().time <= network_.now()) {
        const Event e = events_.top();
        events_.pop();
        handle(e);
        continue;
      }
      // Flows done the moment they were added (no bytes, or no links: a token message)
      // are due now, whatever else is pending.
      if (std::vector<int> done = network_.take_finished(); !done.empty()) {
        for (int f : done) subflow_done(f, network_.now());
        continue;
      }
      const double t_event = events_.empty() ? FlowNetwork::kNever : events_.top().time;
      const double t_flow = network_.next_finish();
      if (t_event == FlowNetwork::kNever && t_flow == FlowNetwork::kNever) break;
      // To the next flow's end or event, whichever is first; the events due then are handled
      // at the top of the loop.
      const double t = std::min(t_flow, t_event);
      network_.advance(t);
      for (int f : network_.take_finished()) subflow_done(f, t);
      if (network_.solved() > params_.max_flows_solved) too_much_work();
    }
    check_all_done();
    return result();
  }

 private:
  static std::vector<double> capacities(const Topology& t) {
    std::vector<double> c;
    for (const Link& l : t.links()) c.push_back(l.bytes_per_s);
    return c;
  }

  // The k-th send from a to b pairs with the k-th receive at b from a (the schedule's
  // matching contract).
  void match_messages() {
    // By ordered pair (a << 32 | b): a's sends to b in step order, and how many are paired.
    // Only the pairs that talk (a table of all pairs of 16,384 ranks would not fit).
    const int n = placement_.ranks;
    auto pair_of = [](int a, int b) { return static_cast<uint64_t>(a) << 32 | static_cast<uint32_t>(b); };
    std::unordered_map<uint64_t, std::pair<std::vector<StepId>, size_t>> sends;
    for (int a = 0; a < n; ++a)
      for (StepId i = 0; i < schedules_[a].steps.size(); ++i)
        if (schedules_[a].steps[i].kind == StepKind::kSend)
          sends[pair_of(a, schedules_[a].steps[i].peer)].first.push_back(i);
    for (int b = 0; b < n; ++b)
      for (StepId j = 0; j < schedules_[b].steps.size(); ++j) {
        const Step& s = schedules_[b].steps[j];
        if (s.kind != StepKind::kRecv && s.kind != StepKind::kRecvReduce) continue;
        const int a = s.peer;
        auto& [to_b, k] = sends[pair_of(a, b)];
        if (k >= to_b.size())
          throw invalid_usage("sim: " + schedules_[b].algorithm + ": rank " + std::to_string(b) +
                              " receives more messages from rank " + std::to_string(a) +
                              " than it sends (a builder bug)");
        Message m;
        m.send = {a, to_b[k++]};
        m.recv = {b, j};
        const Step& send = schedules_[a].steps[m.send.step];
        m.bytes = static_cast<double>(send.src.count * elem_);
        states_[a][m.send.step].message = static_cast<int>(messages_.size());
        states_[b][j].message = static_cast<int>(messages_.size());
        messages_.push_back(m);
      }
  }

  void push(double t, EventKind kind, StepRef ref, int message = -1) {
    events_.push({t, order_++, kind, ref, message});
  }

  void handle(const Event& e) {
    switch (e.kind) {
      case EventKind::kReady:
        return step_ready(e.ref, e.time);
      case EventKind::kDone:
        return step_done(e.ref, e.time);
      case EventKind::kFlowStart:
        return start_flow(e.message);
    }
  }

  const Step& step(StepRef r) const { return schedules_[r.rank].steps[r.step]; }
  StepState& state(StepRef r) { return states_[r.rank][r.step]; }

  // A local computation on the rank's core, after whatever it runs already.
  void compute(StepRef r, double at, double seconds) {
    StepState& s = state(r);
    if (cpu_free_[r.rank] > at) {
      s.cause = last_cpu_[r.rank];
      at = cpu_free_[r.rank];
    }
    cpu_free_[r.rank] = at + seconds;
    last_cpu_[r.rank] = r;
    push(at + seconds, EventKind::kDone, r);
  }

  void step_ready(StepRef r, double t) {
    StepState& s = state(r);
    s.ready = t;
    const Step& st = step(r);
    switch (st.kind) {
      case StepKind::kSend: {
        Message& m = messages_[s.message];
        const bool local = host(m.send.rank) == host(m.recv.rank);
        double head = local ? params_.intra_alpha_s : params_.alpha_s;
        if (!local) {
          paths_.push_back(topology_.route(host(m.send.rank), host(m.recv.rank),
                                           static_cast<uint64_t>(s.message)));
          for (int l : paths_.back()[0].links) head += topology_.links()[l].latency_s;
        } else {
          paths_.emplace_back();
        }
        message_path_[s.message] = static_cast<int>(paths_.size()) - 1;
        push(t + head, EventKind::kFlowStart, r, s.message);
        return;
      }
      case StepKind::kRecv:
      case StepKind::kRecvReduce:
        return maybe_finish_recv(r);
      case StepKind::kCopy:
      case StepKind::kReduce:
        return compute(r, t, core_seconds(st, elem_, params_));
    }
  }

  // A message whose pair is sending another waits for it (pair_fifo.h).
  void start_flow(int message) {
    const Message& m = messages_[message];
    if (fifo_.admit(PairFifo::pair(m.send.rank, m.recv.rank), message)) begin_flow(message);
  }

  void begin_flow(int message) {
    Message& m = messages_[message];
    const std::vector<Path>& paths = paths_[message_path_[message]];
    if (paths.empty()) {  // two ranks of one host: their host's memory path
      m.subflows_left = 1;
      intra_flow(message);
      return;
    }
    m.subflows_left = static_cast<int>(paths.size());
    // On a FIFO link out of its host the message goes behind those posted before it.
    int priority = 0;
    if (const int l = paths[0].links[0]; topology_.links()[l].fifo) {
      m.uplink = l;
      std::vector<int>& queue = uplink_queues_[l];
      priority = static_cast<int>(queue.size());
      queue.push_back(message);
    }
    for (const Path& p : paths) {
      const int f = network_.add(m.bytes * p.share, p.links, priority);
      if (m.first_flow < 0) m.first_flow = f;
      subflow_message_.resize(f + 1, -1);
      subflow_message_[f] = message;
    }
    network_bytes_ += m.bytes;
  }

  // `message` left its FIFO link: the ones behind it move up.
  void leave_uplink(const Message& m, int message) {
    std::vector<int>& queue = uplink_queues_[m.uplink];
    queue.erase(std::find(queue.begin(), queue.end(), message));
    for (size_t i = 0; i < queue.size(); ++i) {
      const Message& next = messages_[queue[i]];
      const int subflows = static_cast<int>(paths_[message_path_[queue[i]]].size());
      for (int f = next.first_flow; f < next.first_flow + subflows; ++f)
        network_.set_priority(f, static_cast<int>(i));
    }
  }

  // A host's memory path is one more resource, after the topology's links.
  void intra_flow(int message) {
    Message& m = messages_[message];
    const int resource = intra_resource(host(m.send.rank));
    const int f = network_.add(m.bytes, {resource});
    subflow_message_.resize(f + 1, -1);
    subflow_message_[f] = message;
  }

  int intra_resource(int h) {
    auto it = intra_ids_.find(h);
    if (it != intra_ids_.end()) return it->second;
    const int id = network_.add_link(params_.intra_bytes_per_s);
    intra_ids_.emplace(h, id);
    return id;
  }

  void subflow_done(int flow, double t) {
    const int message = subflow_message_[flow];
    Message& m = messages_[message];
    if (--m.subflows_left > 0) return;
    m.arrived = t;
    if (m.uplink >= 0) leave_uplink(m, message);
    push(t, EventKind::kDone, m.send);
    maybe_finish_recv(m.recv);
    const int next = fifo_.release(PairFifo::pair(m.send.rank, m.recv.rank));
    if (next >= 0) begin_flow(next);
  }

  void maybe_finish_recv(StepRef r) {
    StepState& s = state(r);
    const Message& m = messages_[s.message];
    if (s.ready < 0 || m.arrived < 0) return;
    double at = s.ready;
    if (m.arrived > at) {
      at = m.arrived;
      s.cause = m.send;
    }
    // Rounds of data: a token (ScheduleBuilder::handshake) orders rounds, it is not one.
    s.rounds = std::max(s.rounds, state(m.send).rounds + (m.bytes > 0 ? 1 : 0));
    if (step(r).kind == StepKind::kRecv) {
      push(at, EventKind::kDone, r);
      return;
    }
    compute(r, at, core_seconds(step(r), elem_, params_));
  }

  void step_done(StepRef r, double t) {
    StepState& s = state(r);
    s.done = t;
    for (StepId d : dependents_[r.rank][r.step]) {
      // Steps finish in time order: the last dependency to finish is what the step waited for.
      StepState& next = states_[r.rank][d];
      next.cause = r;
      next.rounds = std::max(next.rounds, s.rounds);
      if (--next.deps_left == 0) push(t, EventKind::kReady, {r.rank, d});
    }
    if (t > end_.second) end_ = {r, t};
  }

  int host(int rank) const { return placement_.host_of(rank); }

  // Flows that share links all across the network (ranks exchanging with far partners at
  // once) make every message re-solve ~all of them: stop and say so rather than run for hours.
  [[noreturn]] void too_much_work() const {
    size_t done = 0;
    for (const Message& m : messages_) done += m.arrived >= 0 ? 1 : 0;
    throw invalid_usage(
        "sim: " + what_ + " on " + std::to_string(placement_.ranks) +
        " ranks: the full replay stopped at " + std::to_string(network_.now() * 1e6) +
        " us of the call, after " + std::to_string(done) + " of " +
        std::to_string(messages_.size()) + " messages had re-solved the rates of " +
        std::to_string(static_cast<long long>(network_.solved())) +
        " flows (the most it takes: " +
        std::to_string(static_cast<long long>(params_.max_flows_solved)) +
        "); each message shares links with ~every flow in flight (--replay symmetric, fewer "
        "ranks, or a larger --chunk)");
  }

  // Nothing left to happen and a step not done: the replay would report a time that is not
  // the call's. Schedules that pass schedule_check cannot get here; say where it stopped.
  void check_all_done() const {
    for (int r = 0; r < placement_.ranks; ++r) {
      for (StepId i = 0; i < schedules_[r].steps.size(); ++i) {
        if (states_[r][i].done >= 0) continue;
        const Step& st = schedules_[r].steps[i];
        throw invalid_usage("sim: the replay stopped at " + std::to_string(end_.second * 1e6) +
                             " us with rank " + std::to_string(r) + " step " +
                             std::to_string(i) + " (" + std::string(coll::to_string(st.kind)) +
                             (st.peer >= 0 ? " peer " + std::to_string(st.peer) : "") +
                             ") not done");
      }
    }
  }

  ReplayResult result() {
    ReplayResult out;
    out.time_s = end_.second;
    out.messages = messages_.size();
    out.sent_messages.assign(placement_.ranks, 0);
    out.sent_bytes.assign(placement_.ranks, 0);
    for (const Message& m : messages_) {
      ++out.sent_messages[m.send.rank];
      out.sent_bytes[m.send.rank] += m.bytes;
    }
    for (const auto& rank : states_)
      for (const StepState& st : rank) out.rounds = std::max(out.rounds, st.rounds);
    out.network_bytes = network_bytes_;
    const std::vector<double>& carried = network_.link_bytes();
    out.link_bytes.assign(carried.begin(), carried.begin() + topology_.links().size());
    find_bottleneck(topology_, &out);
    for (StepRef r = end_.first; r.rank >= 0 && out.critical_path.size() < 64;) {
      const Step& st = step(r);
      std::string line = "rank " + std::to_string(r.rank) + " step " + std::to_string(r.step) +
                         " " + std::string(coll::to_string(st.kind));
      if (st.peer >= 0)
        line += (st.kind == StepKind::kSend ? " to " : " from ") + std::to_string(st.peer);
      char at[48];
      std::snprintf(at, sizeof at, " done at %.1f us", state(r).done * 1e6);
      line += at;
      out.critical_path.push_back(line);
      r = state(r).cause;
    }
    return out;
  }

  const Topology& topology_;
  const Placement placement_;
  const SimParams params_;
  const size_t elem_;
  const std::string what_;  // "ring allreduce"
  FlowNetwork network_;
  std::vector<Schedule> schedules_;
  std::vector<std::vector<StepState>> states_;
  std::vector<std::vector<std::vector<StepId>>> dependents_;
  std::vector<double> cpu_free_;
  std::vector<StepRef> last_cpu_;
  std::vector<Message> messages_;
  std::vector<std::vector<Path>> paths_;
  std::unordered_map<int, int> message_path_;
  std::unordered_map<int, int> intra_ids_;
  std::vector<int> subflow_message_;
  PairFifo fifo_;
  std::unordered_map<int, std::vector<int>> uplink_queues_;  // by FIFO link: messages, head first
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  uint64_t order_ = 0;
  double network_bytes_ = 0;
  std::pair<StepRef, double> end_{StepRef{}, 0.0};
};

}  // namespace

double core_seconds(const coll::Step& step, size_t elem_bytes, const SimParams& params) {
  switch (step.kind) {
    case StepKind::kCopy:
      return step.src.count * elem_bytes / params.copy_bytes_per_s;
    case StepKind::kReduce:
    case StepKind::kRecvReduce:  // the staging slice (src) holds what came in
      return step.src.count * elem_bytes / params.gamma_bytes_per_s;
    default:
      return 0;
  }
}

void find_bottleneck(const Topology& topology, ReplayResult* r) {
  r->bottleneck_link = -1;
  r->bottleneck_busy = 0;
  for (size_t l = 0; l < r->link_bytes.size(); ++l) {
    if (r->time_s <= 0 || r->link_bytes[l] <= 0) continue;
    const double busy = r->link_bytes[l] / (topology.links()[l].bytes_per_s * r->time_s);
    // Ties (links equally busy but for rounding) go to the first.
    if (busy > r->bottleneck_busy * (1 + 1e-9))
      r->bottleneck_busy = busy, r->bottleneck_link = static_cast<int>(l);
  }
}

ReplayResult replay(const Topology& topology, const Placement& placement, coll::CollArgs args,
                    coll::Algorithm algorithm, const SimParams& params, ReplayMode mode) {
  if (placement.ranks < 1 || placement.ranks_per_host < 1)
    throw invalid_usage("sim: ranks and ranks per host are at least 1");
  const int hosts_needed = (placement.ranks + placement.ranks_per_host - 1) / placement.ranks_per_host;
  if (hosts_needed > topology.hosts())
    throw invalid_usage("sim: " + std::to_string(placement.ranks) + " ranks at " +
                        std::to_string(placement.ranks_per_host) + " per host need " +
                        std::to_string(hosts_needed) + " hosts; " + topology.spec() + " has " +
                        std::to_string(topology.hosts()));
  args.size = placement.ranks;
  args.host_of.clear();
  if (hosts_needed > 1)
    for (int r = 0; r < placement.ranks; ++r) args.host_of.push_back(placement.host_of(r));
  const coll::AlgorithmInfo* info = coll::find_algorithm(args.op, algorithm);
  if (!info || !info->build)
    throw invalid_usage("sim: " + std::string(coll::to_string(args.op)) + " has no algorithm '" +
                        std::string(coll::to_string(algorithm)) + "' to replay");
  if (info->applies && !info->applies(args))
    throw invalid_usage("sim: " + std::string(coll::to_string(algorithm)) + " does not apply to " +
                        std::string(coll::to_string(args.op)) + " on " +
                        std::to_string(placement.ranks) + " ranks");
  // Every rank's schedule is held at once: refuse what would not fit rather than run for
  // hours or out of memory. Sized from a sample of ranks (rank 0 alone stands badly for a
  // parameter server, whose few roots hold most of the steps).
  const ScheduleSize size = sample_schedule_size(args, *info, placement.ranks);
  const double steps = size.steps;
  const bool fits = steps <= kMaxReplaySteps &&
                    (placement.ranks <= kMaxFullReplayRanks || size.sends <= kMaxMessagesAtScale);
  // Above kMaxFullReplayRanks the full replay of an algorithm whose ranks all send at once
  // (ring, halving-doubling, recursive doubling) re-solves ~p flows at ~p events per round:
  // hours at 16,384 ranks. Those are the symmetric ones; trees stay cheap in full.
  if (mode != ReplayMode::kFull)
    if (std::optional<SymmetricReplay> s = replay_symmetric(topology, placement, args, *info, params);
        s && (s->exact || !fits || placement.ranks > kMaxFullReplayRanks ||
              mode == ReplayMode::kSymmetric)) {
      s->result.method = "symmetric (" + s->relabelling + (s->exact ? ")" : ", slowest copy)");
      return std::move(s->result);
    }
  if (!fits) {
    throw invalid_usage(
        "sim: " + std::string(coll::to_string(algorithm)) + " " +
        std::string(coll::to_string(args.op)) + " on " + std::to_string(placement.ranks) +
        " ranks is about " + std::to_string(static_cast<long long>(steps)) +
        " steps and " + std::to_string(static_cast<long long>(size.sends)) +
        " messages; the full replay takes up to " +
        std::to_string(static_cast<long long>(kMaxReplaySteps)) + " steps (above " +
        std::to_string(kMaxFullReplayRanks) + " ranks, " +
        std::to_string(static_cast<long long>(kMaxMessagesAtScale)) + " messages)" +
        ", and this call is not symmetric enough to replay through one rank (fewer ranks, a "
        "larger --chunk, or fewer bytes)");
  }
  bool shaped = false;
  for (const Link& l : topology.links()) shaped = shaped || l.burst_bytes > 0;
  if (!shaped) return Replay(topology, placement, args, *info, params).run();
  // Collectives run back to back (a benchmark's loop, a training loop): a link that idles at
  // the end of one call starts the next with what its bucket gathered meanwhile, a link busy
  // to the end with none. The second of two calls is the one that stands for the loop.
  Replay first(topology, placement, args, *info, params);
  first.run();
  return Replay(topology, placement, args, *info, params, first.end_tokens()).run();
}

}  // namespace plait::sim
