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

int FlowNetwork::add(double bytes, std::vector<int> links) {
  const int id = static_cast<int>(flows_.size());
  Flow f;
  f.remaining = bytes;
  f.links = std::move(links);
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
  return next;
}

std::vector<int> FlowNetwork::take_finished() {
  std::vector<int> out;
  out.swap(finished_);
  return out;
}

// Progressive filling: the link whose capacity left, split among the flows on it not yet
// fixed, is smallest saturates first; its flows get that share; repeat.
void FlowNetwork::reshare() {
  dirty_ = false;
  std::vector<int> touched;
  std::vector<double> left;
  std::vector<std::vector<int>> on;  // by touched index: unfixed flows on the link
  std::vector<int> index_of;         // link -> touched index, -1: untouched
  index_of.assign(capacity_.size(), -1);
  for (int id : active_) {
    flows_[id].rate = -1;  // unfixed
    for (int l : flows_[id].links) {
      if (index_of[l] < 0) {
        index_of[l] = static_cast<int>(touched.size());
        touched.push_back(l);
        left.push_back(capacity_[l]);
        on.emplace_back();
      }
      on[index_of[l]].push_back(id);
    }
  }
  std::vector<size_t> unfixed(touched.size());
  for (size_t i = 0; i < touched.size(); ++i) unfixed[i] = on[i].size();
  for (;;) {
    int tightest = -1;
    double share = kNever;
    for (size_t i = 0; i < touched.size(); ++i) {
      if (unfixed[i] == 0) continue;
      const double s = std::max(left[i], 0.0) / static_cast<double>(unfixed[i]);
      if (s < share) share = s, tightest = static_cast<int>(i);
    }
    if (tightest < 0) break;
    for (int id : on[tightest]) {
      Flow& f = flows_[id];
      if (f.rate >= 0) continue;
      f.rate = share;
      for (int l : f.links) {
        const int i = index_of[l];
        left[i] -= share;
        --unfixed[i];
      }
    }
  }
}

}  // namespace plait::sim
