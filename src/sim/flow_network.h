// Flows sharing links max-min fairly (the flow-level model of network simulators such as
// SimGrid's): every active flow gets a rate such that no link carries more than its
// capacity and no flow could go faster without slowing one that is no faster than it.
// Rates are recomputed whenever the set of flows changes, for the flows that share links with
// the change (directly or through other flows); between changes every flow drains its bytes at
// its rate.
//
// Flows may carry a priority (0 first): the flows of each priority share what the flows
// before them left, max-min among themselves. A FIFO queue is this: its head message takes
// what it can use, the next one the rest.
//
// A flow may stand for `weight` identical flows (the same links, bytes, start and priority):
// max-min gives identical flows the same rate, so they are solved as one that counts
// `weight` times on each of its links.
//
// Ids are reused: an id that take_finished() returned may name a new flow once take_finished()
// is called again (a replay of millions of messages holds only the flows in flight).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace plait::sim {

class FlowNetwork {
 public:
  static constexpr double kNever = std::numeric_limits<double>::infinity();

  // `capacity[l]`: link l's rate in bytes per second.
  explicit FlowNetwork(std::vector<double> capacity);

  // One more resource (a host's memory path); returns its id.
  int add_link(double bytes_per_s);
  // A token bucket on `link`, as Linux's TBF shapes a link: up to `burst` bytes pass at `peak`
  // before the link falls back to its rate; while the link carries less than its rate, the
  // bucket refills at the difference. Starts with `tokens` (a link busy up to now: none).
  void set_bucket(int link, double burst_bytes, double peak_bytes_per_s, double tokens = 0);
  // The tokens in `link`'s bucket now (0 without a bucket).
  double tokens(int link);
  // A flow of `bytes` over `links` (ids into capacity; empty: it is done at once), active from
  // now, of `priority` (0 first), standing for `weight` identical flows. Returns its id.
  int add(double bytes, std::vector<int> links, int priority = 0, double weight = 1);
  // The flow's priority from now on.
  void set_priority(int flow, int priority);
  // Moves time forward to `t` (>= now()): every flow drains at its rate. Flows that finish
  // by then are reported by take_finished().
  void advance(double t);
  // When the next active flow finishes, or a bucket runs dry, at the current rates (kNever
  // if no flow is active). Either changes the rates: the caller advances to it.
  double next_finish() const;
  // Flows that drained (remaining bytes ~0) since the last call; the ids of the call before
  // are free from now on.
  std::vector<int> take_finished();
  double now() const { return now_; }
  size_t active() const { return active_; }
  // Flows solved so far, summed over every re-solve (the work done: a change re-solves the
  // flows that share links with it, directly or through others).
  double solved() const { return solved_; }
  // Bytes each link carried so far.
  const std::vector<double>& link_bytes();
  // Rate of a flow at present (0 once done); of each of the flows a weighted one stands for.
  double rate(int flow) const { return rate_[flow]; }
  // Ids handed out and not yet free: the most flows held at once.
  size_t capacity() const { return flows_.size(); }

 private:
  struct Flow {
    double remaining = 0;  // as of `since`: a flow drains lazily, when its rate changes
    double since = 0;
    std::vector<int> links;
    // slots_[slots + i]: its place in on_link_[links[i]]; room for `room` links there (a
    // reused id keeps its room when its new links fit in it).
    size_t slots = 0;
    uint32_t room = 0;
    double weight = 1;
    uint64_t serial = 0;  // the order of add(): ids are reused, so they do not tell it
    int priority = 0;
    uint32_t version = 0;  // bumped when its rate changes: older Due entries are stale
    bool done = false;
  };
  // When a flow finishes at the rate it had when the entry was made.
  struct Due {
    double time;
    uint64_t serial;  // ties go to the flow added first
    int flow;
    uint32_t version;
    bool operator>(const Due& o) const {
      return time != o.time ? time > o.time : serial > o.serial;
    }
  };
  void reshare();
  // Progressive filling of `flows` (one priority) on the capacity left_.
  void fill(const std::vector<int>& flows);
  // A bucket's tokens brought up to now_ at the link's present load.
  void settle(int link);
  double capacity_now(int link) const;
  // The flow's bytes drained from `since` up to now_ at `rate` (the one it had meanwhile).
  void drain(int id, double rate);
  void mark(int link);
  void finish(int id);
  const Due* next_due() const;

  std::vector<double> capacity_;
  std::vector<double> carried_;
  std::vector<Flow> flows_;
  std::vector<double> rate_;  // by flow, apart: progressive filling reads it for every flow
  std::vector<int> slots_;     // every flow's places on its links, a range each
  std::vector<int> free_ids_;  // done and reported twice over: add() takes these first
  std::vector<int> reported_;  // what take_finished() returned last (free at its next call)
  uint64_t serial_ = 0;
  bool ids_reused_ = false;  // until then, ids are in the order of add()
  std::vector<std::vector<int>> on_link_;  // the active flows on each link
  size_t active_ = 0;
  double solved_ = 0;
  std::vector<int> finished_;
  mutable std::vector<Due> due_;  // a min-heap (std::greater) with stale entries
  double now_ = 0;
  // Links whose flows changed since the last reshare(): only the flows connected to them
  // through shared links (their component) are solved again; max-min fairness splits
  // exactly along components, so the others keep their rates.
  std::vector<int> dirty_links_;
  std::vector<char> is_dirty_;
  // Token buckets, by link (burst 0: none): tokens as of last_, the load since then.
  std::vector<double> burst_, peak_, tokens_, load_, last_;
  std::vector<int> buckets_;  // links with a bucket
  // reshare()'s scratch, kept between calls: link -> index among the component's links (-1:
  // not in it), and per component link its capacity left, its flows, how many are not fixed.
  std::vector<int> index_of_;
  std::vector<int> touched_;
  std::vector<int> component_;
  std::vector<std::pair<uint64_t, int>> by_serial_;  // the component sorted (serial, id)
  std::vector<uint32_t> seen_;  // by flow: the reshare() that took it into its component
  uint32_t pass_ = 0;
  std::vector<double> old_rate_;
  std::vector<double> left_;
  std::vector<std::vector<int>> on_;
  std::vector<double> unfixed_;  // weights
  std::vector<int> live_;
  std::vector<int> level_;  // the component's flows of one priority
  bool prioritized_ = false;  // some flow's priority was ever above 0
};

}  // namespace plait::sim
