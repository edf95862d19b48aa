// The event loop both dependency-graph replays run (full_replay.cc for one collective,
// train/train_replay.cc for a training step): steps become ready and done at times, messages'
// flows start after their head latency, and a FlowNetwork drains the flows in between.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

#include "sim/flow_network.h"

namespace plait::sim {

enum class EventKind : uint8_t { kReady, kDone, kFlowStart };

struct Event {
  double time;
  uint64_t order;  // FIFO among equal times: runs are deterministic
  uint32_t id;     // a step, or for kFlowStart a message
  EventKind kind;
  bool operator>(const Event& o) const {
    return time != o.time ? time > o.time : order > o.order;
  }
};

class EventQueue {
 public:
  void push(double t, EventKind kind, uint32_t id) { queue_.push({t, order_++, id, kind}); }
  bool empty() const { return queue_.empty(); }
  const Event& top() const { return queue_.top(); }
  void pop() { queue_.pop(); }

 private:
  std::priority_queue<Event, std::vector<Event>, std::greater<>> queue_;
  uint64_t order_ = 0;
};

// Until no event and no flow is left: the events due now first (the rates are solved once
// for all the flows that start at an instant, not once per flow), then flows that were done
// the moment they were added (no bytes, or no links), then time moves to the next flow's end
// or event, whichever is first. `handle(event)`, `flow_done(flow, time)`; `check()` after each
// step of time (a guard on the work done, that throws).
template <typename Handle, typename FlowDone, typename Check>
void run_events(EventQueue& events, FlowNetwork& network, Handle handle, FlowDone flow_done,
                Check check) {
  while (true) {
    if (!events.empty() && events.top().time <= network.now()) {
      const Event e = events.top();
      events.pop();
      handle(e);
      continue;
    }
    if (std::vector<int> done = network.take_finished(); !done.empty()) {
      for (int f : done) flow_done(f, network.now());
      continue;
    }
    const double t_event = events.empty() ? FlowNetwork::kNever : events.top().time;
    const double t_flow = network.next_finish();
    if (t_event == FlowNetwork::kNever && t_flow == FlowNetwork::kNever) return;
    const double t = std::min(t_flow, t_event);
    network.advance(t);
    for (int f : network.take_finished()) flow_done(f, t);
    check();
  }
}

}  // namespace plait::sim
