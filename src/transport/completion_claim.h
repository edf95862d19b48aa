// The part of a provider's pending operation that decides who reports it: an operation
// completes exactly once (whoever flips `finished` first pushes the completion; every later
// writer leaves the user's memory alone), and a receive posted on several providers at once
// (Fabric::recv_any_sibling) completes on one of them only.
#pragma once

#include <atomic>
#include <memory>

namespace plait::transport {

struct CompletionClaim {
  // seq_cst throughout: providers pair it with their own flags (e.g. "is in the op table").
  std::atomic<bool> finished{false};
  // A receive posted on several providers: shared by the copies.
  std::shared_ptr<std::atomic<bool>> sibling;

  // Whether the op may complete once and for all (a sibling copy must also win the shared
  // claim).
  bool claim() {
    if (finished.exchange(true, std::memory_order_seq_cst)) return false;
    return take_sibling();
  }
  bool done() const { return finished.load(std::memory_order_acquire); }
  // TagMatcher: a message matched this receive. False if a sibling copy got there first
  // (this copy is finished then, silently).
  bool try_match() {
    if (take_sibling()) return true;
    finished.store(true, std::memory_order_seq_cst);
    return false;
  }
  // TagMatcher, before queueing: whether a sibling copy already completed.
  bool sibling_lost() {
    if (!sibling || owns_sibling_.load() || !sibling->load()) return false;
    finished.store(true, std::memory_order_seq_cst);
    return true;
  }

 private:
  bool take_sibling() {
    if (!sibling || owns_sibling_.load()) return true;
    bool expected = false;
    if (!sibling->compare_exchange_strong(expected, true)) return false;
    owns_sibling_.store(true);
    return true;
  }
  std::atomic<bool> owns_sibling_{false};
};

}  // namespace plait::transport
