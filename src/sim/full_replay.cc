#include "sim/full_replay.h"

#include <algorithm>
#include <cstdio>
#include <unordered_map>

#include "plait/error.h"
#include "sim/copy_routes.h"
#include "sim/flow_network.h"
#include "sim/pair_fifo.h"
#include "sim/replay_events.h"

namespace plait::sim {
namespace {

using coll::Schedule;
using coll::Step;
using coll::StepKind;

// Steps are numbered across the replayed ranks, one after another (base_).
using StepId = uint32_t;
constexpr StepId kNone = UINT32_MAX;

// What the replay reads of a step (a coll::Step is three times this, and there are tens of
// millions of them at 16,384 ranks).
struct StepInfo {
  uint64_t count = 0;  // elements of its source slice: what it sends, reduces or copies
  int32_t peer = -1;
  int32_t rep = 0;     // the replayed rank it belongs to (an index into RankCopies' reps)
  StepKind kind = StepKind::kCopy;
};

struct StepState {
  double ready = -1;  // dependencies done
  double done = -1;
  uint32_t deps_left = 0;
  int32_t message = -1;  // kSend / kRecv / kRecvReduce: its message
  StepId cause = kNone;  // what its start or end waited for last (the critical path)
  uint32_t rounds = 0;   // data messages on the longest chain of messages it waited for
};

struct Message {
  StepId send = kNone, recv = kNone;
  double bytes = 0;
  double arrived = -1;
  int32_t subflows_left = 0;
  int32_t uplink = -1;  // the FIFO link it queues on (Link::fifo), or -1
};

class FullReplay {
 public:
  // `tokens`: per link, its bucket's tokens at the start (empty: none).
  FullReplay(const Topology& t, const Placement& p, const coll::CollArgs& args,
             const coll::AlgorithmInfo& info, const SimParams& params, const RankCopies& copies,
             const std::vector<double>& tokens = {})
      : topology_(t), placement_(p), copies_(copies), params_(params),
        elem_(dtype_size(args.dtype)),
        what_(std::string(coll::to_string(info.algorithm)) + " " +
              std::string(coll::to_string(info.op))),
        network_(capacities(t)), cpu_free_(copies.reps(), 0.0), last_cpu_(copies.reps(), kNone) {
    load_schedules(args, info);
    match_messages();
    for (size_t l = 0; l < t.links().size(); ++l)
      if (t.links()[l].burst_bytes > 0)
        network_.set_bucket(static_cast<int>(l), t.links()[l].burst_bytes,
                            t.links()[l].peak_bytes_per_s, tokens.empty() ? 0 : tokens[l]);
  }

  // Every send was paired with a receive: false where the ranks a replayed rank stands for
  // do not talk as its copies would (not a relabelling after all).
  bool paired() const { return unpaired_sends_ == 0; }

  // After run(): per link, its bucket's tokens when the call ended.
  std::vector<double> end_tokens() {
    network_.advance(std::max(network_.now(), end_time_));
    std::vector<double> out(topology_.links().size());
    for (size_t l = 0; l < out.size(); ++l) out[l] = network_.tokens(static_cast<int>(l));
    return out;
  }

  ReplayResult run() {
    for (StepId g = 0; g < steps_.size(); ++g)
      if (states_[g].deps_left == 0) push(0, EventKind::kReady, g);
    run_events(
        events_, network_, [this](const Event& e) { handle(e); },
        [this](int f, double t) { subflow_done(f, t); },
        [this] {
          if (network_.solved() > params_.max_flows_solved) too_much_work();
        });
    check_all_done();
    return result();
  }

 private:
  static std::vector<double> capacities(const Topology& t) {
    std::vector<double> c;
    for (const Link& l : t.links()) c.push_back(l.bytes_per_s);
    return c;
  }

  // Each replayed rank's schedule, built and kept as StepInfo, its dependencies turned round
  // (dependents_, in one array: what a step's end makes ready).
  void load_schedules(coll::CollArgs args, const coll::AlgorithmInfo& info) {
    std::vector<uint32_t> count;
    dependents_at_.push_back(0);
    for (int i = 0; i < copies_.reps(); ++i) {
      args.rank = copies_.rep_rank(i);
      const Schedule s = info.build(args);
      const StepId base = static_cast<StepId>(steps_.size());
      base_.push_back(base);
      if (rank_algorithm_.empty()) rank_algorithm_ = s.algorithm;
      count.assign(s.steps.size() + 1, 0);
      for (const Step& st : s.steps)
        for (coll::StepId d : s.deps_of(st)) ++count[d + 1];
      for (size_t j = 1; j < count.size(); ++j) count[j] += count[j - 1];
      const size_t first = dependents_.size();
      dependents_.resize(first + count.back());
      for (coll::StepId j = 0; j < s.steps.size(); ++j) {
        const Step& st = s.steps[j];
        steps_.push_back({st.src.count, st.peer, i, st.kind});
        StepState state;
        state.deps_left = st.dep_count;
        states_.push_back(state);
        for (coll::StepId d : s.deps_of(st)) dependents_[first + count[d]++] = base + j;
      }
      // count[j] is now where step j's dependents end.
      for (coll::StepId j = 0; j < s.steps.size(); ++j)
        dependents_at_.push_back(static_cast<uint32_t>(first + count[j]));
    }
  }

  // The k-th send from a to b pairs with the k-th receive at b from a (the schedule's
  // matching contract). With copies, a replayed rank B's receive from s is copy d of the send
  // of s's replayed rank to the rank that copy d takes to B.
  void match_messages() {
    // By (replayed sender, peer): its sends there in step order, and how many are paired.
    // Only the pairs that talk (a table of all pairs of 16,384 ranks would not fit).
    auto pair_of = [](int a, int b) {
      return static_cast<uint64_t>(a) << 32 | static_cast<uint32_t>(b);
    };
    std::unordered_map<uint64_t, std::pair<std::vector<StepId>, size_t>> sends;
    size_t send_count = 0;
    for (StepId g = 0; g < steps_.size(); ++g)
      if (steps_[g].kind == StepKind::kSend) {
        sends[pair_of(steps_[g].rep, steps_[g].peer)].first.push_back(g);
        ++send_count;
      }
    for (StepId g = 0; g < steps_.size(); ++g) {
      const StepInfo& s = steps_[g];
      if (s.kind != StepKind::kRecv && s.kind != StepKind::kRecvReduce) continue;
      const auto [a, d] = copies_.split(s.peer);
      const int to = copies_.image(copies_.rep_rank(s.rep), copies_.inverse(d));
      auto& [to_b, k] = sends[pair_of(a, to)];
      if (k >= to_b.size()) {
        if (copies_.copies() > 1) {  // not a relabelling: the caller replays every rank
          unpaired_sends_ = 1;
          return;
        }
        throw invalid_usage("sim: " + rank_algorithm_ + ": rank " +
                            std::to_string(copies_.rep_rank(s.rep)) +
                            " receives more messages from rank " + std::to_string(s.peer) +
                            " than it sends (a builder bug)");
      }
      Message m;
      m.send = to_b[k++];
      m.recv = g;
      m.bytes = static_cast<double>(steps_[m.send].count * elem_);
      states_[m.send].message = static_cast<int32_t>(messages_.size());
      states_[g].message = static_cast<int32_t>(messages_.size());
      messages_.push_back(m);
    }
    unpaired_sends_ = send_count - messages_.size();
  }

  void push(double t, EventKind kind, uint32_t id) { events_.push(t, kind, id); }

  void handle(const Event& e) {
    switch (e.kind) {
      case EventKind::kReady:
        return step_ready(e.id, e.time);
      case EventKind::kDone:
        return step_done(e.id, e.time);
      case EventKind::kFlowStart:
        return start_flow(static_cast<int>(e.id));
    }
  }

  int rank_of(StepId g) const { return copies_.rep_rank(steps_[g].rep); }
  int host(int rank) const { return placement_.host_of(rank); }

  double seconds_on_core(const StepInfo& s) const {
    Step step;
    step.kind = s.kind;
    step.src.count = s.count;
    return core_seconds(step, elem_, params_);
  }

  // A local computation on the rank's core, after whatever it runs already.
  void compute(StepId g, double at, double seconds) {
    const int rep = steps_[g].rep;
    if (cpu_free_[rep] > at) {
      states_[g].cause = last_cpu_[rep];
      at = cpu_free_[rep];
    }
    cpu_free_[rep] = at + seconds;
    last_cpu_[rep] = g;
    push(at + seconds, EventKind::kDone, g);
  }

  // The message's copies' paths, kept until its flows start; the longest head latency.
  double route_copies(int message) {
    const Message& m = messages_[message];
    double latency = 0;
    std::vector<CopyGroup> groups =
        group_copies(topology_, placement_, copies_, rank_of(m.send), steps_[m.send].peer,
                     static_cast<uint64_t>(message), &latency);
    if (groups.size() > 1) copies_differ_ = true;
    pending_[message] = std::move(groups);
    return latency;
  }

  void step_ready(StepId g, double t) {
    StepState& s = states_[g];
    s.ready = t;
    const StepInfo& st = steps_[g];
    switch (st.kind) {
      case StepKind::kSend: {
        const bool local = host(rank_of(g)) == host(st.peer);
        const double head = (local ? params_.intra_alpha_s : params_.alpha_s) +
                            route_copies(s.message);
        push(t + head, EventKind::kFlowStart, static_cast<uint32_t>(s.message));
        return;
      }
      case StepKind::kRecv:
      case StepKind::kRecvReduce:
        return maybe_finish_recv(g);
      case StepKind::kCopy:
      case StepKind::kReduce:
        return compute(g, t, seconds_on_core(st));
    }
  }

  // A message whose pair is sending another waits for it (pair_fifo.h).
  void start_flow(int message) {
    const Message& m = messages_[message];
    if (fifo_.admit(PairFifo::pair(rank_of(m.send), steps_[m.send].peer), message))
      begin_flow(message);
  }

  void begin_flow(int message) {
    Message& m = messages_[message];
    auto it = pending_.find(message);
    const std::vector<CopyGroup> groups = std::move(it->second);
    pending_.erase(it);
    m.subflows_left = 0;
    for (const CopyGroup& g : groups) m.subflows_left += std::max<int>(1, g.paths.size());
    // On a FIFO link out of its host the message goes behind those posted before it (only
    // in a replay of every rank: replay_in_host_copies refuses FIFO links).
    int priority = 0;
    if (!groups[0].paths.empty())
      if (const int l = groups[0].paths[0].links[0]; topology_.links()[l].fifo) {
        m.uplink = l;
        std::vector<int>& queue = uplink_queues_[l];
        priority = static_cast<int>(queue.size());
        queue.push_back(message);
      }
    for (const CopyGroup& g : groups) {
      if (g.paths.empty()) {  // ranks of one host: their host's memory path
        add_subflow(message, m.bytes, {intra_resource(g.host)}, 0, g.weight);
        continue;
      }
      for (const Path& p : g.paths) add_subflow(message, m.bytes * p.share, p.links, priority, g.weight);
      network_bytes_ += m.bytes * g.weight;
    }
  }

  void add_subflow(int message, double bytes, std::vector<int> links, int priority, int weight) {
    const int f = network_.add(bytes, std::move(links), priority, weight);
    if (static_cast<size_t>(f) >= flow_message_.size()) flow_message_.resize(f + 1, -1);
    flow_message_[f] = message;
    if (messages_[message].uplink >= 0) uplink_flows_[message].push_back(f);
  }

  // `message` left its FIFO link: the ones behind it move up.
  void leave_uplink(const Message& m, int message) {
    std::vector<int>& queue = uplink_queues_[m.uplink];
    queue.erase(std::find(queue.begin(), queue.end(), message));
    uplink_flows_.erase(message);
    for (size_t i = 0; i < queue.size(); ++i) {
      auto flows = uplink_flows_.find(queue[i]);
      if (flows == uplink_flows_.end()) continue;
      for (int f : flows->second) network_.set_priority(f, static_cast<int>(i));
    }
  }

  // A host's memory path is one more resource, after the topology's links.
  int intra_resource(int h) {
    auto it = intra_ids_.find(h);
    if (it != intra_ids_.end()) return it->second;
    const int id = network_.add_link(params_.intra_bytes_per_s);
    intra_ids_.emplace(h, id);
    return id;
  }

  void subflow_done(int flow, double t) {
    const int message = flow_message_[flow];
    Message& m = messages_[message];
    if (--m.subflows_left > 0) return;
    m.arrived = t;
    if (m.uplink >= 0) leave_uplink(m, message);
    push(t, EventKind::kDone, m.send);
    maybe_finish_recv(m.recv);
    const int next = fifo_.release(PairFifo::pair(rank_of(m.send), steps_[m.send].peer));
    if (next >= 0) begin_flow(next);
  }

  void maybe_finish_recv(StepId g) {
    StepState& s = states_[g];
    const Message& m = messages_[s.message];
    if (s.ready < 0 || m.arrived < 0) return;
    double at = s.ready;
    if (m.arrived > at) {
      at = m.arrived;
      s.cause = m.send;
    }
    // Rounds of data: a token (ScheduleBuilder::handshake) orders rounds, it is not one.
    s.rounds = std::max(s.rounds, states_[m.send].rounds + (m.bytes > 0 ? 1 : 0));
    if (steps_[g].kind == StepKind::kRecv) {
      push(at, EventKind::kDone, g);
      return;
    }
    compute(g, at, seconds_on_core(steps_[g]));
  }

  void step_done(StepId g, double t) {
    StepState& s = states_[g];
    s.done = t;
    for (uint32_t i = dependents_at_[g]; i < dependents_at_[g + 1]; ++i) {
      // Steps finish in time order: the last dependency to finish is what the step waited for.
      const StepId d = dependents_[i];
      StepState& next = states_[d];
      next.cause = g;
      next.rounds = std::max(next.rounds, s.rounds);
      if (--next.deps_left == 0) push(t, EventKind::kReady, d);
    }
    if (t > end_time_) end_time_ = t, end_step_ = g;
  }

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
    for (StepId g = 0; g < steps_.size(); ++g) {
      if (states_[g].done >= 0) continue;
      const StepInfo& st = steps_[g];
      throw invalid_usage("sim: the replay stopped at " + std::to_string(end_time_ * 1e6) +
                          " us with rank " + std::to_string(rank_of(g)) + " step " +
                          std::to_string(g - base_[st.rep]) + " (" +
                          std::string(coll::to_string(st.kind)) +
                          (st.peer >= 0 ? " peer " + std::to_string(st.peer) : "") + ") not done");
    }
  }

  ReplayResult result() {
    ReplayResult out;
    out.time_s = end_time_;
    const int n = copies_.copies();
    out.messages = messages_.size() * static_cast<size_t>(n);
    std::vector<size_t> count(copies_.reps(), 0);
    std::vector<double> bytes(copies_.reps(), 0);
    for (const Message& m : messages_) {
      ++count[steps_[m.send].rep];
      bytes[steps_[m.send].rep] += m.bytes;
    }
    out.sent_messages.resize(placement_.ranks);
    out.sent_bytes.resize(placement_.ranks);
    for (int r = 0; r < placement_.ranks; ++r) {
      const int rep = copies_.split(r).first;
      out.sent_messages[r] = count[rep];
      out.sent_bytes[r] = bytes[rep];
    }
    for (const StepState& st : states_) out.rounds = std::max<int>(out.rounds, st.rounds);
    out.network_bytes = network_bytes_;
    const std::vector<double>& carried = network_.link_bytes();
    out.link_bytes.assign(carried.begin(), carried.begin() + topology_.links().size());
    find_bottleneck(topology_, &out);
    for (StepId g = end_step_; g != kNone && out.critical_path.size() < 64; g = states_[g].cause) {
      const StepInfo& st = steps_[g];
      std::string line = "rank " + std::to_string(rank_of(g)) + " step " +
                         std::to_string(g - base_[st.rep]) + " " +
                         std::string(coll::to_string(st.kind));
      if (st.peer >= 0)
        line += (st.kind == StepKind::kSend ? " to " : " from ") + std::to_string(st.peer);
      char at[48];
      std::snprintf(at, sizeof at, " done at %.1f us", states_[g].done * 1e6);
      line += at;
      if (n > 1) line += " (each rank of its host alike)";
      out.critical_path.push_back(line);
    }
    if (n > 1) out.method = copies_differ_ ? "in-host copies, slowest copy" : "in-host copies";
    return out;
  }

  const Topology& topology_;
  const Placement placement_;
  const RankCopies copies_;
  const SimParams params_;
  const size_t elem_;
  const std::string what_;  // "ring allreduce"
  std::string rank_algorithm_;
  FlowNetwork network_;
  std::vector<StepId> base_;  // by replayed rank: its first step
  std::vector<StepInfo> steps_;
  std::vector<StepState> states_;
  std::vector<uint32_t> dependents_at_;  // step g's dependents: dependents_[at[g], at[g + 1])
  std::vector<StepId> dependents_;
  std::vector<double> cpu_free_;  // by replayed rank
  std::vector<StepId> last_cpu_;
  std::vector<Message> messages_;
  size_t unpaired_sends_ = 0;
  bool copies_differ_ = false;
  // By message, from its send's start until its flows start: its copies' paths.
  std::unordered_map<int, std::vector<CopyGroup>> pending_;
  std::unordered_map<int, int> intra_ids_;
  std::vector<int> flow_message_;  // by flow id (ids are reused: only the flows in flight)
  PairFifo fifo_;
  std::unordered_map<int, std::vector<int>> uplink_queues_;  // by FIFO link: messages, head first
  std::unordered_map<int, std::vector<int>> uplink_flows_;   // a message on a FIFO link: its flows
  EventQueue events_;
  double network_bytes_ = 0;
  double end_time_ = 0;
  StepId end_step_ = kNone;
};

// Runs `first`. Collectives run back to back (a benchmark's loop, a training loop): on shaped
// links, a link that idles at the end of one call starts the next with what its bucket gathered
// meanwhile, a link busy to the end with none, so there the second of two calls is the one
// reported: it stands for the loop.
ReplayResult run_as_in_a_loop(FullReplay& first, const Topology& topology,
                              const Placement& placement, const coll::CollArgs& args,
                              const coll::AlgorithmInfo& info, const SimParams& params,
                              const RankCopies& copies) {
  ReplayResult result = first.run();
  bool shaped = false;
  for (const Link& l : topology.links()) shaped = shaped || l.burst_bytes > 0;
  if (!shaped) return result;
  return FullReplay(topology, placement, args, info, params, copies, first.end_tokens()).run();
}

}  // namespace

ReplayResult replay_every_rank(const Topology& topology, const Placement& placement,
                               const coll::CollArgs& args, const coll::AlgorithmInfo& info,
                               const SimParams& params) {
  const RankCopies copies = RankCopies::every_rank(placement.ranks);
  FullReplay first(topology, placement, args, info, params, copies);
  return run_as_in_a_loop(first, topology, placement, args, info, params, copies);
}

std::optional<InHostReplay> replay_in_host_copies(const Topology& topology,
                                                  const Placement& placement,
                                                  const coll::CollArgs& args,
                                                  const coll::AlgorithmInfo& info,
                                                  const SimParams& params) {
  const int per_host = placement.ranks_per_host;
  if (per_host < 2 || placement.ranks % per_host != 0) return std::nullopt;
  for (const Link& l : topology.links())
    if (l.fifo) return std::nullopt;
  const RankCopies copies = RankCopies::rotation_in_hosts(placement);
  if (!copies.relabel_sampled_hosts(args, info)) return std::nullopt;
  FullReplay first(topology, placement, args, info, params, copies);
  if (!first.paired()) return std::nullopt;
  InHostReplay out;
  out.result = run_as_in_a_loop(first, topology, placement, args, info, params, copies);
  out.exact = out.result.method == "in-host copies";
  return out;
}

}  // namespace plait::sim
