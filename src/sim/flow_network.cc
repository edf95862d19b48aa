#include "sim/flow_network.h"

#include <algorithm>

namespace plait::sim {
namespace {

// A flow with fewer bytes left is done (rounding of rate * time).
constexpr double kDrained = 1e-6;

}  // namespace

FlowNetwork::FlowNetwork(std::vector<double> capacity)
    : capacity_(std::move(capacity)), carried_(capacity_.size(), 0) {}

int FlowNetwork::add_link(double bytes_per_s) {
  capacity_.push_back(bytes_per_s);
  carried_.push_back(0);
  return static_cast<int>(capacity_.size()) - 1;
}

void FlowNetwork::set_bucket(int link, double burst_bytes, double peak_bytes_per_s,
                             double tokens) {
  const size_t n = capacity_.size();
  burst_.resize(n, 0), peak_.resize(n, 0), tokens_.resize(n, 0), load_.resize(n, 0),
      last_.resize(n, 0);
  burst_[link] = burst_bytes;
  peak_[link] = std::max(peak_bytes_per_s, capacity_[link]);
  tokens_[link] = std::clamp(tokens, 0.0, burst_bytes);
  last_[link] = now_;
  dirty_ = true;
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

int FlowNetwork::add(double bytes, std::vector<int> links, int priority) {
  const int id = static_cast<int>(flows_.size());
  Flow f;
  f.remaining = bytes;
  f.links = std::move(links);
  f.priority = priority;
  prioritized_ = prioritized_ || priority > 0;
  if (f.links.empty() || bytes <= kDrained) {
    f.done = true;
    flows_.push_back(std::move(f));
    finished_.push_back(id);
    return id;
  }
  flows_.push_back(std::move(f));
  active_.push_back(id);
  dirty_ = true;
  return id;
}

void FlowNetwork::set_priority(int flow, int priority) {
  Flow& f = flows_[flow];
  if (f.priority == priority) return;
  f.priority = priority;
  prioritized_ = prioritized_ || priority > 0;
  dirty_ = !f.done || dirty_;
}

void FlowNetwork::advance(double t) {
  if (dirty_) reshare();
  const double dt = t - now_;
  if (dt > 0) {
    for (int id : active_) {
      Flow& f = flows_[id];
      const double moved = std::min(f.remaining, f.rate * dt);
      f.remaining -= moved;
      for (int l : f.links) carried_[l] += moved;
    }
    now_ = t;
    // A bucket that ran dry takes its link down to its rate.
    for (int l : loaded_) {
      const bool had = tokens_[l] > kDrained;
      settle(l);
      if (had && tokens_[l] <= kDrained * 1e3) {
        tokens_[l] = 0;
        dirty_ = true;
      }
    }
  }
  // A flow within rounding of its end at t is done at t.
  size_t kept = 0;
  for (int id : active_) {
    Flow& f = flows_[id];
    if (f.remaining <= kDrained || (f.rate > 0 && f.remaining / f.rate <= 1e-15)) {
      for (int l : f.links) carried_[l] += f.remaining;
      f.remaining = 0;
      f.rate = 0;
      f.done = true;
      finished_.push_back(id);
      dirty_ = true;
    } else {
      active_[kept++] = id;
    }
  }
  active_.resize(kept);
}

double FlowNetwork::next_finish() const {
  if (dirty_) const_cast<FlowNetwork*>(this)->reshare();
  double next = kNever;
  for (int id : active_) {
    const Flow& f = flows_[id];
    if (f.rate > 0) next = std::min(next, now_ + f.remaining / f.rate);
  }
  for (int l : loaded_)
    if (tokens_[l] > kDrained && load_[l] > capacity_[l])
      next = std::min(next, now_ + tokens_[l] / (load_[l] - capacity_[l]));
  return next;
}

std::vector<int> FlowNetwork::take_finished() {
  std::vector<int> out;
  out.swap(finished_);
  return out;
}

// Progressive filling: the link whose capacity left, split among the flows on it not yet
// fixed, is smallest saturates first; its flows get that share; repeat. Every link at that
// smallest share saturates in the same round: in a collective's symmetric steps that is most
// of them, so the rounds are few.
void FlowNetwork::reshare() {
  dirty_ = false;
  if (index_of_.size() < capacity_.size()) index_of_.resize(capacity_.size(), -1);
  touched_.clear();
  left_.clear();
  for (int id : active_) {
    flows_[id].rate = -1;  // unfixed
    for (int l : flows_[id].links) {
      if (index_of_[l] >= 0) continue;
      index_of_[l] = static_cast<int>(touched_.size());
      touched_.push_back(l);
      settle(l);
      left_.push_back(capacity_now(l));
    }
  }
  if (on_.size() < touched_.size()) on_.resize(touched_.size());
  unfixed_.resize(touched_.size());
  if (!prioritized_) {
    fill(active_);
  } else {
    std::vector<int> order = active_;
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return flows_[a].priority < flows_[b].priority; });
    for (size_t i = 0; i < order.size();) {
      level_.clear();
      const int p = flows_[order[i]].priority;
      for (; i < order.size() && flows_[order[i]].priority == p; ++i) level_.push_back(order[i]);
      fill(level_);
    }
  }
  // The buckets' loads from now on (settled at the old loads first).
  if (!burst_.empty()) {
    for (int l : loaded_) {
      settle(l);
      load_[l] = 0;
    }
    loaded_.clear();
    for (int id : active_)
      for (int l : flows_[id].links)
        if (static_cast<size_t>(l) < burst_.size() && burst_[l] > 0) {
          loaded_.push_back(l);
          load_[l] += flows_[id].rate;
        }
    std::sort(loaded_.begin(), loaded_.end());
    loaded_.erase(std::unique(loaded_.begin(), loaded_.end()), loaded_.end());
  }
  for (int l : touched_) index_of_[l] = -1;
}

void FlowNetwork::fill(const std::vector<int>& flows) {
  for (size_t i = 0; i < touched_.size(); ++i) {
    on_[i].clear();
    unfixed_[i] = 0;
  }
  for (int id : flows)
    for (int l : flows_[id].links) {
      on_[index_of_[l]].push_back(id);
      ++unfixed_[index_of_[l]];
    }
  // The links with flows not yet fixed; those that lose their last one leave the list, so a
  // round costs the links still in play (per-flow ECMP makes many rounds of a few links each).
  live_.clear();
  for (size_t i = 0; i < touched_.size(); ++i)
    if (unfixed_[i] > 0) live_.push_back(static_cast<int>(i));
  for (;;) {
    double share = kNever;
    for (int i : live_) share = std::min(share, std::max(left_[i], 0.0) / unfixed_[i]);
    if (share == kNever) break;
    const double limit = share * (1 + 1e-12);
    for (int i : live_) {
      if (unfixed_[i] == 0 || std::max(left_[i], 0.0) / unfixed_[i] > limit) continue;
      for (int id : on_[i]) {
        Flow& f = flows_[id];
        if (f.rate >= 0) continue;
        f.rate = share;
        for (int l : f.links) {
          const int j = index_of_[l];
          left_[j] -= share;
          --unfixed_[j];
        }
      }
    }
    std::erase_if(live_, [&](int i) { return unfixed_[i] == 0; });
  }
}

}  // namespace plait::sim
