// Progress: draining the rings, the progress thread and its sleep, transfers in chunks, and
// turning a dead or departed peer into failed operations. Nothing here throws to a caller:
// every error becomes a completion (or a failed peer).
//
// A pass (pass()) is one round over the work: up to kRecordsPerPass records per inbox, the
// outboxes' queued records, one chunk per transfer. It runs on whichever thread gets the
// drain lock: the progress thread, or a thread spinning on one of our queues (inline
// progress). The progress thread spins or sleeps per the wait policy:
//
//   spin    never sleeps (unless a thread polls inline: then the poller does the work)
//   hybrid  spins for spin_time after the last work, then sleeps
//   block   sleeps as soon as there is nothing to do
//
// Asleep, it waits on the doorbell futex in our segment (doorbell.h), at most ~100 ms: then
// it looks at the peers' pidfds, so a peer that died is noticed within that even when no
// message would ever tell.
#include <poll.h>
#include <sched.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include "core/cpu_relax.h"
#include "core/log.h"
#include "core/process.h"
#include "transport/shm/doorbell.h"
#include "transport/shm/shm_fabric.h"

namespace plait::transport::shm {
namespace {

constexpr size_t kRecordsPerPass = 64;
constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);

}  // namespace

bool ShmFabric::progress() {
  try {
    return pass();
  } catch (const std::exception& e) {
    log(LogLevel::kError, "rank ", rank_, ": shm fabric '", name_, "': progress: ", e.what());
    return false;
  }
}

bool ShmFabric::pass() {
  std::unique_lock lock(drain_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  bool did = false;
  if (peer_check_due_.load(std::memory_order_relaxed) != kCheckNone) {
    int due = peer_check_due_.exchange(kCheckNone);
    if (due != kCheckNone) check_peers(due == kCheckAlive);
  }
  for (auto& p : peers_)
    if (p->inbox.maybe_ready() && !p->ring_broken.load(std::memory_order_relaxed))
      did |= drain(*p);
  for (auto& p : peers_)
    if (p->outbox.has_backlog()) did |= p->outbox.flush();
  if (transfer_count_.load(std::memory_order_relaxed) != 0) did |= step_transfers();
  return did;
}

bool ShmFabric::drain(Peer& p) {
  bool did = false;
  for (size_t i = 0; i < kRecordsPerPass; ++i) {
    Record r;  // a private copy: the peer can rewrite the ring meanwhile
    const char* payload = nullptr;
    RingReader::Peek k = p.inbox.peek(&r, &payload);
    if (k == RingReader::Peek::kEmpty) break;
    if (k == RingReader::Peek::kCorrupt) {
      p.ring_broken.store(true);
      fail_peer(p, "protocol error: rank " + std::to_string(p.rank) +
                       " wrote a malformed record into its ring", false);
      break;
    }
    try {
      dispatch(p, r, payload);
    } catch (const std::exception& e) {
      p.ring_broken.store(true);
      fail_peer(p, "protocol error from rank " + std::to_string(p.rank) + ": " + e.what(), false);
      break;
    }
    p.inbox.consume(r);
    did = true;
  }
  // The producer may wait for this room (its outbox queued records).
  if (did && p.inbox.release()) ring_doorbell(p.view.header());
  return did;
}

void ShmFabric::dispatch(Peer& p, const Record& r, const char* payload) {
  switch (r.type) {
    case RecordType::kEager: return on_eager(p, r, payload);
    case RecordType::kRts: return on_rts(p, r);
    case RecordType::kCts: return on_cts(p, r);
    case RecordType::kFin: return on_fin(p, r);
    case RecordType::kData: return on_data(p, r, payload);
    case RecordType::kSendAborted: return on_send_aborted(p, r);
    case RecordType::kWrite: return on_write(p, r, payload);
    case RecordType::kWriteImm: return on_write_imm(p, r);
    case RecordType::kReadReq: return on_read_request(p, r);
    case RecordType::kAtomic: return on_atomic(p, r);
    case RecordType::kWriteAck:
    case RecordType::kReadResp:
    case RecordType::kAtomicResp: return on_reply(p, r, payload);
    case RecordType::kPad: break;  // skipped by the reader
  }
}

// --- transfers ---

void ShmFabric::queue_transfer(Transfer t) {
  // Counted first: the count never drops below the transfers queued (has_work() reads it).
  transfer_count_.fetch_add(1, std::memory_order_seq_cst);
  {
    std::lock_guard lock(transfers_mu_);
    transfers_.push_back(std::move(t));
  }
  wake_self();
}

bool ShmFabric::step_transfers() {
  // One chunk of each transfer queued now, round robin (new ones wait for the next pass).
  size_t n;
  {
    std::lock_guard lock(transfers_mu_);
    n = transfers_.size();
  }
  for (size_t i = 0; i < n; ++i) {
    Transfer t;
    {
      std::lock_guard lock(transfers_mu_);
      t = std::move(transfers_.front());
      transfers_.pop_front();
    }
    bool finished = true;
    try {
      finished = t.kind == Transfer::Kind::kPull ? step_pull(t) : step_rma(t);
    } catch (const std::exception& e) {
      fail(*t.op, remote_error(std::string("internal error: ") + e.what(), context_of(*t.op)));
    }
    if (finished) {
      transfer_count_.fetch_sub(1, std::memory_order_seq_cst);
    } else {
      std::lock_guard lock(transfers_mu_);
      transfers_.push_back(std::move(t));
    }
  }
  return n > 0;
}

// --- peers ---

void ShmFabric::check_peers(bool pidfds) {
  pollfds_.resize(peers_.size());
  if (pidfds) {
    for (size_t i = 0; i < peers_.size(); ++i)
      pollfds_[i] = {peers_[i]->link.pidfd.get(), POLLIN, 0};
    if (::poll(pollfds_.data(), pollfds_.size(), 0) < 0)
      for (auto& p : pollfds_) p.revents = 0;
  }
  for (size_t i = 0; i < peers_.size(); ++i) {
    Peer& p = *peers_[i];
    if (p.failed.load()) continue;
    const bool closed = p.view.header().closed.load(std::memory_order_acquire) != 0;
    const bool dead =
        pidfds && (p.link.pidfd.valid()
                       ? (pollfds_[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0
                       : process_gone(p.link.pid));
    if (!closed && !dead) continue;
    // What it sent before it went stays deliverable: take it all in first.
    while (!p.ring_broken.load() && drain(p)) {
    }
    if (closed) {
      const char* text = p.view.header().first_loss;
      const size_t n = ::strnlen(text, sizeof p.view.header().first_loss);
      fail_peer(p, shut_down_reason(p.rank, std::string(text, n)), true);
    }
    else
      fail_peer(p, "rank " + std::to_string(p.rank) + " (pid " + std::to_string(p.link.pid) +
                       ") died without shutting down its fabric (killed or crashed?)", false);
  }
  if (pidfds && config_.keepalive.count() > 0) {
    const auto now = Clock::now();
    if (now >= next_stop_check_) {
      next_stop_check_ = now + config_.keepalive;
      check_stopped_peers(now);
    }
  }
}

// A stopped process on this host says nothing, like a silent remote one (the tcp provider's
// keep-alives); here its state can be read instead: /proc/<pid>/stat, once per keep-alive
// period. It is failed once stopped for the peer timeout on end.
void ShmFabric::check_stopped_peers(Clock::time_point now) {
  const auto limit = effective_peer_timeout(config_);
  for (auto& peer : peers_) {
    Peer& p = *peer;
    if (p.failed.load()) continue;
    if (!process_stopped(p.link.pid)) {
      p.stopped_since = {};
      continue;
    }
    if (p.stopped_since == Clock::time_point{}) p.stopped_since = now;
    if (now - p.stopped_since < limit) continue;
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f",
                  std::chrono::duration<double>(now - p.stopped_since).count());
    const std::string why = "rank " + std::to_string(p.rank) + " (pid " +
                            std::to_string(p.link.pid) + ") has been stopped for " + seconds +
                            " s (SIGSTOP, or a debugger holds it; PLAIT_PEER_TIMEOUT=" +
                            std::to_string(limit.count()) + " ms)";
    fail_peer(p, why, false);
  }
}

void ShmFabric::fail_peer(Peer& p, const std::string& why, bool orderly) {
  if (!mark_failed(p.rank, why, orderly)) return;
  p.outbox.clear();
  p.denied_imm_writes.clear();
  matcher_.drop_incomplete_from(p.rank);
  auto involved = fails_with(p.rank, orderly);
  std::vector<OpRef> ops = ops_.select(involved);
  std::vector<OpRef> posted = matcher_.posted_if(involved);
  ops.insert(ops.end(), posted.begin(), posted.end());
  fail_all(ops, why);
}

// --- the progress thread ---

bool ShmFabric::has_work() const {
  for (const auto& p : peers_) {
    const RingControl* c = own_view_.ring_control(p->index);
    if (c->tail.load(std::memory_order_seq_cst) != c->head.load(std::memory_order_seq_cst) &&
        !p->ring_broken.load(std::memory_order_relaxed))
      return true;
  }
  return transfer_count_.load(std::memory_order_seq_cst) != 0 ||
         peer_check_due_.load(std::memory_order_relaxed) != kCheckNone;
}

void ShmFabric::wake_self(bool force) { ring_doorbell(own_header(), force); }

void ShmFabric::sleep_until_rung(std::chrono::nanoseconds timeout) {
  SegmentHeader& h = own_header();
  h.sleeping.store(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint32_t seen = h.doorbell.load(std::memory_order_seq_cst);
  // While a thread polls inline, it does the work: stay asleep even if there is some.
  if (!stop_requested_.load() && (h.pollers.load(std::memory_order_seq_cst) != 0 || !has_work()))
    futex_wait_shared(&h.doorbell, seen, timeout);
  h.sleeping.store(0, std::memory_order_relaxed);
}

void ShmFabric::progress_loop() {
  auto last_check = Clock::now();
  auto last_work = last_check;
  unsigned spins = 0;
  const bool crowded =
      peers_.size() + 1 > std::max<size_t>(1, std::thread::hardware_concurrency());
  while (!stop_requested_.load(std::memory_order_relaxed)) {
    if (progress()) {
      last_work = Clock::now();
      continue;
    }
    const auto now = Clock::now();
    if (now - last_check >= kLivenessPeriod) {
      last_check = now;
      peer_check_due_.store(kCheckAlive);
      continue;
    }
    const bool polled = own_header().pollers.load(std::memory_order_relaxed) != 0;
    // With more ranks than cores, a spinning progress thread takes the core from the very
    // rank whose message it waits for: sleep at once and let the waiting callers spin.
    const bool spin = !crowded && (config_.wait_policy == WaitPolicy::kSpin ||
                                   (config_.wait_policy == WaitPolicy::kHybrid &&
                                    now - last_work < config_.spin_time));
    if (spin && !polled) {
      // The yield lets a thread that shares our core run (oversubscribed hosts).
      if ((++spins & 63) == 0)
        sched_yield();
      else
        cpu_relax();
      continue;
    }
    sleep_until_rung(kLivenessPeriod - (now - last_check));
    int none = kCheckNone;
    peer_check_due_.compare_exchange_strong(none, kCheckClosed);
  }
}

}  // namespace plait::transport::shm
