// A worker's view of its ring buffer on one server: which slots it may write next. The worker
// takes slots in ring order and the server hands them back (credits) once it has consumed
// them. The server may hand them back out of order (a push held for a later round keeps its
// slot while later ones are consumed), so credits name slots and the ring is a queue of free
// slots: in the steady state that queue is exactly the ring's wrap-around order. A slot is
// never written before the server has handed it back: flow control by credits, never by
// overwriting.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

namespace plait::ps {

class SlotRing {
 public:
  explicit SlotRing(uint32_t slots) : held_(slots, false) {
    for (uint32_t i = 0; i < slots; ++i) free_.push_back(i);
  }

  uint32_t slots() const { return static_cast<uint32_t>(held_.size()); }
  bool empty() const { return free_.empty(); }
  size_t available() const { return free_.size(); }

  // The next slot to write; the caller checks empty() first.
  uint32_t take() {
    const uint32_t s = free_.front();
    free_.pop_front();
    held_[s] = true;
    return s;
  }
  // A credit from the server. False for a slot that was not taken (a protocol error: the
  // caller fails the peer rather than trust its ring state).
  bool give_back(uint32_t slot) {
    if (slot >= held_.size() || !held_[slot]) return false;
    held_[slot] = false;
    free_.push_back(slot);
    return true;
  }

 private:
  std::deque<uint32_t> free_;
  std::vector<bool> held_;
};

}  // namespace plait::ps
