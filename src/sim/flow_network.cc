#include "sim/flow_network.h"

#include <algorithm>
#include <functional>

namespace plait::sim {
namespace {

// A flow with fewer bytes left is done (rounding of rate * time).
constexpr double kDrained = 1e-6;

}  // namespace

FlowNetwork::FlowNetwork(std::vector<double> capacity)
    : capacity_(std::move(capacity)), carried_(capacity_.size(), 0),
      on_link_(capacity_.size()), is_dirty_(capacity_.size(), 0),
      index_of_(capacity_.size(), -1) {}

int FlowNetwork::add_link(double bytes_per_s) {
  capacity_.push_back(bytes_per_s);
  carried_.push_back(0);
  on_link_.emplace_back();
  is_dirty_.push_back(0);
  index_of_.push_back(-1);
  return static_cast<int>(capacity_.size()) - 1;
}

void FlowNetwork::set_bucket(int link, double burst_bytes, double peak_bytes_per_s,
                             double tokens) {
  const size_t n = capacity_.size();
  burst_.resize(n, 0), peak_.resize(n, 0), tokens_.resize(n, 0), load_.resize(n, 0),
      last_.resize(n, 0);
  if (burst_[link] <= 0) buckets_.push_back(link);
  burst_[link] = burst_bytes;
  peak_[link] = std::max(peak_bytes_per_s, capacity_[link]);
  tokens_[link] = std::clamp(tokens, 0.0, burst_bytes);
  last_[link] = now_;
  mark(link);
}

double FlowNetwork::tokens(int link) {
  if (static_cast<size_t>(link) >= burst_.size() || burst_[link] <= 0) return 0;
  settle(link);
  return tokens_[link];
}

void FlowNetwork::settle(int link) {
  if (static_cast<size_t>(link) >= burst_.size() || burst_[link] <= 0) return;
  const double dt = now_ - last_[link];
  tokens_[link] = std::clamp(tokens_[link] + (capacity_[link] - load_[link]) * dt, 0.0,
                             burst_[link]);
  last_[link] = now_;
}

double FlowNetwork::capacity_now(int link) const {
  if (static_cast<size_t>(link) < burst_.size() && burst_[link] > 0 && tokens_[link] > kDrained)
    return peak_[link];
  return capacity_[link];
}

void FlowNetwork::mark(int link) {
  if (is_dirty_[link]) return;
  is_dirty_[link] = 1;
  dirty_links_.push_back(link);
}

void FlowNetwork::drain(int id, double rate) {
  Flow& f = flows_[id];
  const double moved = std::min(f.remaining, rate * (now_ - f.since));
  if (moved > 0) {
    f.remaining -= moved;
    for (int l : f.links) carried_[l] += moved * f.weight;
  }
  f.since = now_;
}

int FlowNetwork::add(double bytes, std::vector<int> links, int priority, double weight) {
  int id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
    ids_reused_ = true;
  } else {
    id = static_cast<int>(flows_.size());
    flows_.emplace_back();
    rate_.push_back(0);
  }
  Flow& f = flows_[id];
  // A reused id keeps its version counting up: the Due entries of its past life stay stale.
  f.remaining = bytes;
  f.since = now_;
  f.serial = serial_++;
  f.links = std::move(links);
  f.weight = weight;
  f.priority = priority;
  f.done = false;
  rate_[id] = 0;
  prioritized_ = prioritized_ || priority > 0;
  if (f.links.empty() || bytes <= kDrained) {
    f.done = true;
    finished_.push_back(id);
    return id;
  }
  if (f.links.size() > f.room) {
    f.slots = slots_.size();
    f.room = static_cast<uint32_t>(f.links.size());
    slots_.resize(slots_.size() + f.links.size());
  }
  for (size_t i = 0; i < f.links.size(); ++i) {
    const int l = f.links[i];
    slots_[f.slots + i] = static_cast<int>(on_link_[l].size());
    on_link_[l].push_back(id);
    mark(l);
  }
  ++active_;
  return id;
}

void FlowNetwork::set_priority(int flow, int priority) {
  Flow& f = flows_[flow];
  if (f.priority == priority) return;
  f.priority = priority;
  prioritized_ = prioritized_ || priority > 0;
  if (!f.done)
    for (int l : f.links) mark(l);
}

// Done: its last bytes counted, and off its links (which its component sees at the next
// reshare()).
void FlowNetwork::finish(int id) {
  Flow& f = flows_[id];
  for (int l : f.links) carried_[l] += f.remaining * f.weight;
  f.remaining = 0;
  rate_[id] = 0;
  f.done = true;
  ++f.version;
  for (size_t i = 0; i < f.links.size(); ++i) {
    std::vector<int>& on = on_link_[f.links[i]];
    const int slot = slots_[f.slots + i];
    const int moved = on.back();
    on[slot] = moved;
    on.pop_back();
    if (moved != id) {
      Flow& m = flows_[moved];
      for (size_t j = 0; j < m.links.size(); ++j)
        if (m.links[j] == f.links[i] && slots_[m.slots + j] == static_cast<int>(on.size())) {
          slots_[m.slots + j] = slot;
          break;
        }
    }
    mark(f.links[i]);
  }
  --active_;
}

void FlowNetwork::advance(double t) {
  if (!dirty_links_.empty()) reshare();
  if (t > now_) {
    now_ = t;
    // A bucket that ran dry takes its link down to its rate.
    for (int l : buckets_) {
      const bool had = tokens_[l] > kDrained;
      settle(l);
      if (had && tokens_[l] <= kDrained * 1e3) {
        tokens_[l] = 0;
        mark(l);
      }
    }
  }
  // A flow whose end has come, or within rounding of it, is done at t (late in a long call t
  // has too few bits for the last bytes of a fast flow: its end is the time it is due). Due
  // entries come in order of their ends, so the first one that is not done ends the search.
  const size_t before = finished_.size();
  while (const Due* top = next_due()) {
    const Flow& f = flows_[top->flow];
    const double rate = rate_[top->flow];
    const double left = f.remaining - rate * (t - f.since);
    if (top->time > t && left > kDrained && left / rate > 1e-15) break;
    const int id = top->flow;
    std::pop_heap(due_.begin(), due_.end(), std::greater<>{});
    due_.pop_back();
    finish(id);
    finished_.push_back(id);
  }
  // In the order they were added (ids are reused, so not by id): flows that end together are
  // reported as every run reports them, and what the caller starts next queues in that order.
  if (ids_reused_)
    std::sort(finished_.begin() + static_cast<std::ptrdiff_t>(before), finished_.end(),
              [&](int a, int b) { return flows_[a].serial < flows_[b].serial; });
  else
    std::sort(finished_.begin() + static_cast<std::ptrdiff_t>(before), finished_.end());
}

// The first Due entry that is not stale (nullptr: none).
const FlowNetwork::Due* FlowNetwork::next_due() const {
  while (!due_.empty()) {
    const Due& top = due_.front();
    const Flow& f = flows_[top.flow];
    if (!f.done && f.version == top.version) return &top;
    std::pop_heap(due_.begin(), due_.end(), std::greater<>{});
    due_.pop_back();
  }
  return nullptr;
}

double FlowNetwork::next_finish() const {
  if (!dirty_links_.empty()) const_cast<FlowNetwork*>(this)->reshare();
  const Due* top = next_due();
  double next = top ? top->time : kNever;
  for (int l : buckets_)
    if (tokens_[l] > kDrained && load_[l] > capacity_[l])
      next = std::min(next, now_ + tokens_[l] / (load_[l] - capacity_[l]));
  return next;
}

std::vector<int> FlowNetwork::take_finished() {
  // The caller is done with the ids it was given last time (it may have added flows while
  // going through them: those must not have reused one of them).
  free_ids_.insert(free_ids_.end(), reported_.begin(), reported_.end());
  reported_ = finished_;
  std::vector<int> out;
  out.swap(finished_);
  return out;
}

const std::vector<double>& FlowNetwork::link_bytes() {
  for (size_t id = 0; id < flows_.size(); ++id)
    if (!flows_[id].done) drain(static_cast<int>(id), rate_[id]);
  return carried_;
}

// The component of the changed links: every flow on them, every link of those flows, and so
// on. Its flows are filled again (their rates may all move); the rest keep theirs.
void FlowNetwork::reshare() {
  ++pass_;
  if (seen_.size() < flows_.size()) seen_.resize(flows_.size(), 0);
  touched_.clear();
  component_.clear();
  for (int l : dirty_links_) {
    is_dirty_[l] = 0;
    index_of_[l] = static_cast<int>(touched_.size());
    touched_.push_back(l);
  }
  dirty_links_.clear();
  for (size_t i = 0; i < touched_.size(); ++i)
    for (int id : on_link_[touched_[i]]) {
      if (seen_[id] == pass_) continue;
      seen_[id] = pass_;
      component_.push_back(id);
      for (int l : flows_[id].links) {
        if (index_of_[l] >= 0) continue;
        index_of_[l] = static_cast<int>(touched_.size());
        touched_.push_back(l);
      }
    }
  solved_ += static_cast<double>(component_.size());
  // In the order the flows were added: the sums below come out the same every run. Until an
  // id is reused (never, in a network solved once) that is the order of ids.
  if (ids_reused_) {
    by_serial_.clear();
    for (int id : component_) by_serial_.emplace_back(flows_[id].serial, id);
    std::sort(by_serial_.begin(), by_serial_.end());
    for (size_t i = 0; i < component_.size(); ++i) component_[i] = by_serial_[i].second;
  } else {
    std::sort(component_.begin(), component_.end());
  }
  left_.clear();
  for (int l : touched_) {
    settle(l);  // at the old load
    left_.push_back(capacity_now(l));
  }
  old_rate_.clear();
  for (int id : component_) {
    old_rate_.push_back(rate_[id]);
    rate_[id] = -1;  // unfixed
  }
  if (on_.size() < touched_.size()) on_.resize(touched_.size());
  unfixed_.resize(touched_.size());
  if (!prioritized_) {
    fill(component_);
  } else {
    std::vector<int> order = component_;
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return flows_[a].priority < flows_[b].priority; });
    for (size_t i = 0; i < order.size();) {
      level_.clear();
      const int p = flows_[order[i]].priority;
      for (; i < order.size() && flows_[order[i]].priority == p; ++i) level_.push_back(order[i]);
      fill(level_);
    }
  }
  // A flow whose rate moved drains at the old one up to now and gets a new end.
  for (size_t i = 0; i < component_.size(); ++i) {
    const int id = component_[i];
    Flow& f = flows_[id];
    const double rate = rate_[id];
    if (rate == old_rate_[i]) continue;
    drain(id, old_rate_[i]);
    ++f.version;
    if (rate > 0) {
      due_.push_back({now_ + f.remaining / rate, f.serial, component_[i], f.version});
      std::push_heap(due_.begin(), due_.end(), std::greater<>{});
    }
  }
  // Stale entries outnumbering the live ones (rates that moved again and again): dropped.
  if (due_.size() > 2 * active_ + 64) {
    std::erase_if(due_, [&](const Due& d) {
      return flows_[d.flow].done || flows_[d.flow].version != d.version;
    });
    std::make_heap(due_.begin(), due_.end(), std::greater<>{});
  }
  // The buckets' loads from now on (settled at the old loads above).
  if (!buckets_.empty())
    for (int l : touched_) {
      if (static_cast<size_t>(l) >= burst_.size() || burst_[l] <= 0) continue;
      load_[l] = 0;
      for (int id : on_link_[l]) load_[l] += rate_[id] * flows_[id].weight;
    }
  for (int l : touched_) index_of_[l] = -1;
}

// Progressive filling: the link whose capacity left, split among the flows on it not yet
// fixed, is smallest saturates first; its flows get that share; repeat. Every link at that
// smallest share saturates in the same round: in a collective's symmetric steps that is most
// of them, so the rounds are few.
void FlowNetwork::fill(const std::vector<int>& flows) {
  for (size_t i = 0; i < touched_.size(); ++i) {
    on_[i].clear();
    unfixed_[i] = 0;
  }
  for (int id : flows)
    for (int l : flows_[id].links) {
      on_[index_of_[l]].push_back(id);
      unfixed_[index_of_[l]] += flows_[id].weight;
    }
  // The links with flows not yet fixed; those that lose their last one leave the list, so a
  // round costs the links still in play (per-flow ECMP makes many rounds of a few links each).
  live_.clear();
  for (size_t i = 0; i < touched_.size(); ++i)
    if (unfixed_[i] > 0) live_.push_back(static_cast<int>(i));
  // A link's unfixed weight is a sum of weights taken off again: it is done at ~0, not 0.
  auto done = [&](int i) { return unfixed_[i] < 0.5; };
  for (;;) {
    double share = kNever;
    for (int i : live_) share = std::min(share, std::max(left_[i], 0.0) / unfixed_[i]);
    if (share == kNever) break;
    const double limit = share * (1 + 1e-12);
    for (int i : live_) {
      if (done(i) || std::max(left_[i], 0.0) / unfixed_[i] > limit) continue;
      for (int id : on_[i]) {
        if (rate_[id] >= 0) continue;
        rate_[id] = share;
        const double w = flows_[id].weight;
        for (int l : flows_[id].links) {
          const int j = index_of_[l];
          left_[j] -= share * w;
          unfixed_[j] -= w;
        }
      }
    }
    std::erase_if(live_, [&](int i) { return done(i); });
  }
}

}  // namespace plait::sim
