// Messages from one rank to one peer leave one at a time, in the order they were posted: a
// TCP stream, a shared-memory ring and an RDMA queue pair all deliver in order, so the k-th
// chunk a tree forwards has arrived whole before the (k+1)-th moves. Sharing the link among a
// pair's posted messages instead (each its max-min share) would finish them all together, at
// the end, and hold back every step that waits for the first of them. Both replays queue a
// pair's messages here.
#pragma once

#include <cstdint>
#include <deque>
#include <unordered_map>

namespace plait::sim {

class PairFifo {
 public:
  static uint64_t pair(int from, int to) {
    return static_cast<uint64_t>(static_cast<uint32_t>(from)) << 32 | static_cast<uint32_t>(to);
  }

  // True when `message` may start now; else it waits behind the pair's messages before it.
  bool admit(uint64_t pair, int message) {
    std::deque<int>& q = queues_[pair];
    q.push_back(message);
    return q.size() == 1;
  }

  // The pair's message in flight is done: the next one to start, or -1.
  int release(uint64_t pair) {
    auto it = queues_.find(pair);
    if (it == queues_.end() || it->second.empty()) return -1;
    it->second.pop_front();
    if (it->second.empty()) {
      queues_.erase(it);
      return -1;
    }
    return it->second.front();
  }

 private:
  std::unordered_map<uint64_t, std::deque<int>> queues_;  // front: the message in flight
};

}  // namespace plait::sim
