// Two-sided matching shared by the providers: posted receives against arriving message
// headers, per (source, tag), in order (MPI's non-overtaking rule), with any-source receives.
// A header nobody waits for becomes an unexpected entry (its eager payload buffered by the
// provider, or the sender's rendezvous request kept).
//
// The provider supplies the types:
//   Op     a receive: a CompletionClaim (completion_claim.h) with std::atomic<int> peer
//          (kAnySource until matched), uint64_t tag, std::atomic<uint64_t> message_length /
//          message_header
//   Entry  an unexpected message: int source; uint64_t tag, header, length;
//          bool rendezvous, complete; std::shared_ptr<Op> claimed_by; default-constructible
//
// Unexpected entries are bounded per source (Limits, from PLAIT_MAX_UNEXPECTED and
// PLAIT_MAX_UNEXPECTED_MSGS): past them arrive() queues nothing and says so, and the provider
// fails that peer with an error naming it, instead of buffering without end.
//
// The linear scans are deliberate: posted and unexpected lists are short in practice (a few
// per peer), and any-source receives make an index by source awkward. The list nodes come
// from a pool guarded by the matcher's lock, so that posting and matching a receive does not
// allocate once the pool is warm (the shm provider's eager fast path relies on it).
#pragma once

#include <cstdint>
#include <string>
#include <functional>
#include <list>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <vector>

#include "core/futex_mutex.h"
#include "transport/fabric.h"
#include "transport/free_list_resource.h"

namespace plait::transport {

// What one source may leave waiting for receives at once (eager payload bytes; entries of
// any kind): a bound on the memory a fast or faulty peer can make us hold.
struct UnexpectedLimits {
  size_t bytes = SIZE_MAX;
  size_t messages = SIZE_MAX;
};
struct UnexpectedUsage {
  size_t bytes = 0;
  size_t messages = 0;
};

// Why a message of `length` bytes from `source` was refused (TagMatcher::Arrival::over_limit).
inline std::string unexpected_limit_error(int source, uint64_t length, const UnexpectedUsage& used,
                                          const UnexpectedLimits& limits) {
  return "rank " + std::to_string(source) + " sent a " + std::to_string(length) +
         "-byte message while " + std::to_string(used.messages) + " messages (" +
         std::to_string(used.bytes) + " bytes) from it already wait for their receives here, " +
         "beyond PLAIT_MAX_UNEXPECTED_MSGS=" + std::to_string(limits.messages) +
         " or PLAIT_MAX_UNEXPECTED=" + std::to_string(limits.bytes) +
         " (a receiver that does not keep up, or a faulty peer)";
}

template <typename Op, typename Entry>
class TagMatcher {
 public:
  using OpRef = std::shared_ptr<Op>;
  using EntryRef = std::shared_ptr<Entry>;

  using Limits = UnexpectedLimits;
  using Usage = UnexpectedUsage;
  void set_limits(Limits limits) {
    std::lock_guard lock(mu_);
    limits_ = limits;
  }
  const Limits& limits() const { return limits_; }

  struct Arrival {
    OpRef recv;          // a posted recv, now removed and bound to the source
    EntryRef unexpected;  // else the new entry, already queued
    bool over_limit = false;  // neither: the source has too much waiting (nothing queued)
    Usage usage;              // with over_limit: what the source has waiting
  };
  // A message header from `source`. `fill(Entry&)` sets the provider's own fields of a new
  // unexpected entry before other threads can see it.
  template <typename Fill>
  Arrival arrive(int source, uint64_t tag, uint64_t header, uint64_t length, bool rendezvous,
                 Fill&& fill) {
    std::lock_guard lock(mu_);
    for (auto it = posted_.begin(); it != posted_.end();) {
      OpRef& recv = *it;
      if (recv->done()) {  // cancelled or failed: drop it on the way
        it = posted_.erase(it);
        continue;
      }
      if (accepts(*recv, source, tag)) {
        if (!take(*recv)) {  // matched by a sibling on another provider: gone
          it = posted_.erase(it);
          continue;
        }
        OpRef matched = std::move(recv);
        posted_.erase(it);
        matched->peer.store(source, std::memory_order_relaxed);
        matched->message_length.store(length, std::memory_order_relaxed);
        matched->message_header.store(header, std::memory_order_relaxed);
        return {std::move(matched), nullptr};
      }
      ++it;
    }
    Usage& used = usage_of(source);
    const size_t bytes = rendezvous ? 0 : length;
    if (used.messages >= limits_.messages || bytes > limits_.bytes - used.bytes)
      return {nullptr, nullptr, true, used};
    used.messages += 1;
    used.bytes += bytes;
    auto entry = std::allocate_shared<Entry>(std::pmr::polymorphic_allocator<Entry>(&entry_pool_));
    entry->source = source;
    entry->tag = tag;
    entry->header = header;
    entry->length = length;
    entry->rendezvous = rendezvous;
    fill(*entry);
    unexpected_.push_back(entry);
    return {nullptr, std::move(entry)};
  }

  Arrival arrive(int source, uint64_t tag, uint64_t header, uint64_t length, bool rendezvous) {
    return arrive(source, tag, header, length, rendezvous, [](Entry&) {});
  }

  struct Posted {
    EntryRef match;         // null: the recv is queued
    bool complete = false;  // the match's payload is there (else the recv claimed it)
  };
  // A new recv: the oldest matching unexpected message (removed), else the recv is queued.
  // A recv whose sibling already matched elsewhere is neither matched nor queued.
  Posted post(const OpRef& recv) {
    std::lock_guard lock(mu_);
    int want = recv->peer.load(std::memory_order_relaxed);
    for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
      const EntryRef& e = *it;
      if (e->tag != recv->tag || (want != kAnySource && want != e->source)) continue;
      if (!take(*recv)) return {};
      EntryRef match = std::move(*it);
      unexpected_.erase(it);
      release(*match);
      recv->peer.store(match->source, std::memory_order_relaxed);
      recv->message_length.store(match->length, std::memory_order_relaxed);
      recv->message_header.store(match->header, std::memory_order_relaxed);
      bool complete = match->rendezvous || match->complete;
      if (!complete) match->claimed_by = recv;
      return {std::move(match), complete};
    }
    if (!lost(*recv)) posted_.push_back(recv);
    return {};
  }

  // The eager payload of an unexpected entry is all there; returns the recv that claimed it
  // meanwhile, if any.
  OpRef payload_complete(const EntryRef& entry) {
    std::lock_guard lock(mu_);
    entry->complete = true;
    return std::move(entry->claimed_by);
  }

  // Removes posted recvs that finished (cancelled or failed).
  void purge_finished() {
    std::lock_guard lock(mu_);
    posted_.remove_if([](const OpRef& op) { return op->done(); });
  }
  // Drops what can never complete from a failed source: rendezvous requests and eager
  // messages whose payload was cut off. Complete eager messages stay deliverable.
  void drop_incomplete_from(int source) {
    std::lock_guard lock(mu_);
    unexpected_.remove_if([&](const EntryRef& e) {
      const bool drop = e->source == source && (e->rendezvous || !e->complete);
      if (drop) release(*e);
      return drop;
    });
  }
  // The posted recvs that satisfy `pred` (they stay posted; a provider fails them, and
  // arrive() drops them once done).
  std::vector<OpRef> posted_if(const std::function<bool(const Op&)>& pred) const {
    std::lock_guard lock(mu_);
    std::vector<OpRef> out;
    for (const OpRef& op : posted_)
      if (pred(*op)) out.push_back(op);
    return out;
  }

 private:
  // An any-source receive that a composite fabric posted on several providers carries a
  // shared claim (CompletionClaim::sibling): the first provider to match it wins, the others
  // drop their copy without a completion.
  static bool take(Op& recv) { return recv.try_match(); }
  static bool lost(Op& recv) { return recv.sibling_lost(); }

  void release(const Entry& e) {
    Usage& used = usage_of(e.source);
    used.messages -= 1;
    used.bytes -= e.rendezvous ? 0 : e.length;
  }

  // Sources are ranks: a vector indexed by rank, grown on first use (a hash map's lookup on
  // every eager message cost more than an index; docs/measurements.md).
  Usage& usage_of(int source) {
    const auto i = static_cast<size_t>(source);
    if (i >= usage_.size()) usage_.resize(i + 1);
    return usage_[i];
  }

  static bool accepts(const Op& recv, int source, uint64_t tag) {
    int want = recv.peer.load(std::memory_order_relaxed);
    return recv.tag == tag && (want == kAnySource || want == source);
  }

  // Room for a list node of a shared_ptr (two links and the pointer pair).
  static constexpr size_t kNodeBytes = 64;
  // Room for an entry and its shared_ptr control block.
  static constexpr size_t kEntryBytes = sizeof(Entry) + 64;

  // First, so that it is destroyed last: unexpected entries come from it (freed wherever
  // their last reference drops, hence the lock of its own), and the provider must drop the
  // ones it holds (a socket reader's Incoming) before the matcher goes.
  SynchronizedFreeListResource entry_pool_{kEntryBytes};
  mutable FutexMutex mu_;
  // Before the lists: the pool must outlive their nodes. Guarded by mu_ like the lists.
  FreeListResource pool_{kNodeBytes};
  std::pmr::list<OpRef> posted_{&pool_};
  std::pmr::list<EntryRef> unexpected_{&pool_};
  Limits limits_;
  std::vector<Usage> usage_;  // by source rank, of the entries in unexpected_
};

}  // namespace plait::transport
