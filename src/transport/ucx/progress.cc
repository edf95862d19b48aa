// Who progresses the UCX worker: a caller polling one of our completion queues does it
// inline (try-lock: it never waits for the thread), and the progress thread otherwise. The
// thread sleeps on the worker's wake-up fd once ucx().ucp_worker_arm() says nothing is pending;
// `sleeping_` is set before the arm, so a caller that posts work after it wakes the thread
// (track()), and one that posted before it made the arm report busy.
//
// Failures: an endpoint error (error handling mode peer: the connection broke, the peer
// died, a keep-alive of UCX's went unanswered) fails the peer and every op that waits on it,
// naming it; a goodbye is an orderly end.
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <unordered_set>

#include "core/log.h"
#include "transport/ucx/ucx_api.h"
#include "transport/ucx/ucx_fabric.h"

namespace plait::transport::ucx {
namespace {

// How long the thread sleeps at most without an event: a bound on a missed wake-up, never
// on correctness.
constexpr int kSleepMs = 100;
// While callers poll, the parked thread looks whether they still do after this period,
// doubled at each look that finds them polling, up to the maximum: it bounds how late a
// worker nobody polls any more is progressed again, and costs a wake-up per period (at a
// fixed 500 us, a 4 MiB ping-pong over UCX's tcp made ~5 context switches per message).
constexpr auto kParkCheckMin = std::chrono::microseconds(200);
constexpr auto kParkCheckMax = std::chrono::microseconds(2000);

}  // namespace

bool UcxFabric::drain_locked() {
  bool any = false;
  while (ucx().ucp_worker_progress(w_.worker) != 0) any = true;
  return any;
}

void UcxFabric::wake_progress() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof one);
}

void UcxFabric::start_progress() {
  wake_fd_ = net::Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  epoll_ = net::Fd(::epoll_create1(EPOLL_CLOEXEC));
  park_epoll_ = net::Fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!wake_fd_.valid() || !epoll_.valid() || !park_epoll_.valid())
    throw Error(ErrorCategory::kSystem, std::string("eventfd/epoll: ") + std::strerror(errno),
                {.rank = rank_, .op = "ucx fabric setup"});
  // data.u64: -1 the worker, -2 our wake-up, else the rank whose process exited.
  // The parked set lacks the worker's fd: it stays readable until the next arm.
  auto watch = [&](int fd, int64_t what, bool parked_too) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = static_cast<uint64_t>(what);
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0 ||
        (parked_too && ::epoll_ctl(park_epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0))
      throw Error(ErrorCategory::kSystem, std::string("epoll_ctl: ") + std::strerror(errno),
                  {.rank = rank_, .op = "ucx fabric setup"});
  };
  watch(w_.efd, -1, false);
  watch(wake_fd_.get(), -2, true);
  for (int p = 0; p < size_; ++p)
    if (peers_[p] && peers_[p]->pidfd.valid()) watch(peers_[p]->pidfd.get(), p, true);
  progress_ = std::thread([this] { progress_loop(); });
}

void UcxFabric::progress_loop() {
  ::pthread_setname_np(::pthread_self(), "plait-ucx");
  // The poll-pass count when a park last found nobody polling: a poller count that stays up
  // without passes (a submitter that lent its poll and went off) does not park us again.
  uint64_t idle_at = UINT64_MAX;
  // A caller may also poll() in a loop without saying so (a user's verbs-style poll loop):
  // then its passes move between two rounds of this loop. Seen once per round.
  uint64_t passes_seen = poll_passes_.load(std::memory_order_relaxed);
  bool unannounced = false;
  auto callers_poll = [&] {
    return (unannounced || pollers_.load(std::memory_order_seq_cst) > 0) &&
           poll_passes_.load(std::memory_order_relaxed) != idle_at;
  };
  while (!stop_requested_.load()) {
    const uint64_t passes = poll_passes_.load(std::memory_order_relaxed);
    unannounced = passes != passes_seen;
    passes_seen = passes;
    if (!callers_poll()) {
      // Until a caller starts polling: then it progresses, and this thread holding the lock
      // through a long transfer would leave it spinning idle on the other core.
      std::lock_guard lock(worker_mu_);
      bool any = false;
      while (!callers_poll() && ucx().ucp_worker_progress(w_.worker) != 0) any = true;
      if (any) continue;
    }
    if (callers_poll()) {
      if (park() == ParkEnd::kIdle) idle_at = poll_passes_.load(std::memory_order_relaxed);
      passes_seen = poll_passes_.load(std::memory_order_relaxed);
      continue;
    }
    ucs_status_t armed;
    {
      std::lock_guard lock(worker_mu_);
      sleeping_.store(true, std::memory_order_seq_cst);
      armed = ucx().ucp_worker_arm(w_.worker);
    }
    if (armed == UCS_OK && !stop_requested_.load()) {
      epoll_event events[8];
      const int n = ::epoll_wait(epoll_.get(), events, 8, kSleepMs);
      sleeping_.store(false, std::memory_order_seq_cst);
      handle_events(events, n);
    }
    sleeping_.store(false, std::memory_order_seq_cst);
  }
}

UcxFabric::ParkEnd UcxFabric::park() {
  // Away from the worker while callers poll it (asleep on its fd we would be woken for every
  // message they take anyway: a context switch each, on cores their peers need). We look
  // again after a check period, which doubles while they keep polling: a whole period
  // without a poll pass means nobody polls any more. A poller on its way to sleep hands off
  // (the eventfd) and ends the park at once; exited peers' pidfds end it too.
  uint64_t passes = poll_passes_.load(std::memory_order_relaxed);
  std::chrono::nanoseconds period = kParkCheckMin;
  ParkEnd end = ParkEnd::kWoken;
  for (;;) {
    parked_.store(true, std::memory_order_seq_cst);
    if (stop_requested_.load() || handed_off_.exchange(false, std::memory_order_seq_cst)) break;
    const timespec ts{.tv_sec = 0, .tv_nsec = static_cast<long>(period.count())};
    epoll_event events[8];
    const int n = ::epoll_pwait2(park_epoll_.get(), events, 8, &ts, nullptr);
    if (n > 0) {
      parked_.store(false, std::memory_order_seq_cst);
      handle_events(events, n);
      break;
    }
    const uint64_t now = poll_passes_.load(std::memory_order_relaxed);
    if (now == passes && !inline_draining_.load(std::memory_order_relaxed)) {
      end = ParkEnd::kIdle;
      break;
    }
    passes = now;
    period = std::min<std::chrono::nanoseconds>(period * 2, kParkCheckMax);
  }
  parked_.store(false, std::memory_order_seq_cst);
  return end;
}

void UcxFabric::handle_events(const epoll_event* events, int n) {
  for (int i = 0; i < n; ++i) {
    const auto what = static_cast<int64_t>(events[i].data.u64);
    if (what == -2) {
      uint64_t drained;
      while (::read(wake_fd_.get(), &drained, sizeof drained) > 0) {
      }
    } else if (what >= 0) {
      check_exited(static_cast<int>(what));
    }
  }
}

void UcxFabric::check_exited(int peer) {
  Peer& p = *peers_[peer];
  // Off the epoll set: a pidfd stays readable once its process is gone.
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, p.pidfd.get(), nullptr);
  ::epoll_ctl(park_epoll_.get(), EPOLL_CTL_DEL, p.pidfd.get(), nullptr);
  std::lock_guard lock(worker_mu_);
  drain_locked();  // what it sent before it went (its goodbye, if it said one) counts first
  if (p.failed.load()) return;
  fail_peer(peer,
            "rank " + std::to_string(peer) + " (pid " + std::to_string(p.pid) +
                ") died without shutting down its fabric",
            false);
}

void UcxFabric::begin_polling() { pollers_.fetch_add(1, std::memory_order_seq_cst); }

void UcxFabric::end_polling() { pollers_.fetch_sub(1, std::memory_order_seq_cst); }

bool UcxFabric::progress() {
  // Not an atomic add (a locked instruction on every probe): the parked thread only asks
  // whether the count moved, and two pollers' racing increments still move it.
  poll_passes_.store(poll_passes_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (!worker_mu_.try_lock()) return false;
  inline_draining_.store(true, std::memory_order_relaxed);  // a long pass is a pass too
  // One pass, as ucx_perftest polls: the caller looks at its queue and comes back; draining
  // until idle cost a second, empty pass on every message.
  const bool any = ucx().ucp_worker_progress(w_.worker) != 0;
  inline_draining_.store(false, std::memory_order_relaxed);
  worker_mu_.unlock();
  // A large transfer moves without a local event while the peer copies it (a rendezvous
  // over shared memory, a get on a NIC): for its expected duration it counts as activity,
  // so a hybrid waiter keeps polling instead of sleeping into two thread wake-ups.
  if (any) return true;
  // The clock only while a transfer is expected (it costs as much as an idle pass).
  int64_t until = transfer_until_.load(std::memory_order_relaxed);
  if (until == 0) return false;
  if (Clock::now().time_since_epoch().count() < until) return true;
  transfer_until_.compare_exchange_strong(until, 0, std::memory_order_relaxed);
  return false;
}

void UcxFabric::expect_transfer(size_t bytes) {
  if (bytes < cost_model_.eager_threshold) return;
  const double us = 2.0 * static_cast<double>(bytes) / cost_model_.beta_bytes_per_us + 50.0;
  const int64_t until =
      (Clock::now() + std::chrono::microseconds(static_cast<int64_t>(us))).time_since_epoch().count();
  int64_t seen = transfer_until_.load(std::memory_order_relaxed);
  while (seen < until &&
         !transfer_until_.compare_exchange_weak(seen, until, std::memory_order_relaxed)) {
  }
}

void UcxFabric::hand_off() {
  // seq_cst pairs with park(): it sets parked_ before reading handed_off_, we set
  // handed_off_ before reading parked_; one of us sees the other.
  handed_off_.store(true, std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_seq_cst) || parked_.load(std::memory_order_seq_cst))
    wake_progress();
}

int UcxFabric::checked_source(int32_t source, const char* what) const {
  if (source_rank(source, size_, rank_) < 0 || !peers_[source]) {
    log(LogLevel::kWarn, "rank ", rank_, ": ucx fabric '", name_, "': dropped a ", what,
        " that names rank ", source, ", which this provider does not serve");
    return -1;
  }
  return source;
}

void UcxFabric::on_endpoint_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto& f = *static_cast<UcxFabric*>(arg);
  for (int p = 0; p < f.size_; ++p) {
    if (f.w_.eps[p] != ep) continue;
    const bool orderly = f.peers_[p]->said_goodbye;
    f.fail_peer(p,
                orderly ? shut_down_reason(p, "")
                        : "rank " + std::to_string(p) + "'s UCX endpoint failed: " +
                              ucx().ucs_status_string(status) +
                              " (the process died, or its host is unreachable)",
                orderly);
    return;
  }
}

ucs_status_t UcxFabric::on_goodbye(void* arg, const void* header, size_t header_bytes,
                                   void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto& f = *static_cast<UcxFabric*>(arg);
  const int32_t source = goodbye_source(header, header_bytes);
  if (f.checked_source(source, "goodbye") < 0) return UCS_OK;
  f.peers_[source]->said_goodbye = true;
  std::string its_first_loss;  // a rendezvous descriptor is not the text: left out
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
    its_first_loss = bounded_text(data, length);
  f.fail_peer(source, shut_down_reason(source, its_first_loss), true);
  return UCS_OK;
}

void UcxFabric::fail_peer(int peer, const std::string& why, bool orderly) {
  if (!mark_failed(peer, why, orderly)) return;
  matcher_.drop_incomplete_from(peer);
  const auto failing = fails_with(peer, orderly);
  fail_all(ops_.select(failing), why);
  fail_all(matcher_.posted_if(failing), why);  // posted receives are there, not in the table
}

void UcxFabric::await_requests(const std::vector<OpRef>& ops) {
  std::unordered_set<const Op*> ending;
  for (const OpRef& op : ops) ending.insert(op.get());
  std::unique_lock lock(worker_mu_);
  auto pending = [&] {
    std::vector<void*> out;
    for (const auto& [request, in] : in_flight_)
      if (in.op && ending.count(in.op.get())) out.push_back(request);
    return out;
  };
  for (void* r : pending()) ucx().ucp_request_cancel(w_.worker, r);
  const Deadline deadline = Deadline::after(std::max(config_.timeout, std::chrono::milliseconds(1000)));
  while (!pending().empty()) {
    drain_locked();
    if (pending().empty()) break;
    if (deadline.expired()) {
      log(LogLevel::kWarn, "rank ", rank_, ": ucx fabric '", name_, "': ", pending().size(),
          " cancelled transfer(s) still in UCX after ", config_.timeout.count(), " ms");
      break;
    }
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    lock.lock();
  }
}

}  // namespace plait::transport::ucx
