// A FIFO over one growable circular buffer: once it has grown to the deepest backlog it
// has seen, push_back and pop_front allocate nothing (std::deque allocates and frees a node
// every few elements of a steady flow, which the per-message paths paid for).
//
// Not thread-safe; its owner guards it. Elements keep their place (and address) until
// popped, except when push_back grows the buffer, which moves them.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace plait::transport {

template <typename T>
class RingQueue {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

  T& front() { return slots_[head_]; }
  // The i-th element from the front.
  T& operator[](size_t i) { return slots_[wrap(head_ + i)]; }

  void push_back(T&& value) {
    if (size_ == slots_.size()) grow();
    slots_[wrap(head_ + size_)] = std::move(value);
    ++size_;
  }
  void push_back(const T& value) { push_back(T(value)); }
  // Puts `value` before the i-th element (i <= size()), moving the ones behind it back.
  void insert(size_t i, T&& value) {
    push_back(std::move(value));
    for (size_t j = size_ - 1; j > i; --j) std::swap((*this)[j], (*this)[j - 1]);
  }
  // Resets the slot so that what the element owns is released now, not when it is reused.
  void pop_front() {
    slots_[head_] = T();
    head_ = wrap(head_ + 1);
    --size_;
  }
  void clear() {
    while (!empty()) pop_front();
  }

 private:
  size_t wrap(size_t i) const { return i >= slots_.size() ? i - slots_.size() : i; }

  void grow() {
    std::vector<T> bigger(slots_.empty() ? 8 : slots_.size() * 2);
    for (size_t i = 0; i < size_; ++i) bigger[i] = std::move((*this)[i]);
    slots_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace plait::transport
