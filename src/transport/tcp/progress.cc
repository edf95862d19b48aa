// The TCP provider's progress thread: one epoll over every socket (edge-triggered), reading
// and dispatching incoming messages, writing queued frames when sockets have room, and
// turning a dead or departed peer into failed operations. It never throws: every error
// becomes a completion. A caller that polls one of our queues does the same work inline
// (inline_progress.cc) through serve(); rx_mu_ keeps the two from reading one socket.
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "core/log.h"
#include "transport/tcp/tcp_fabric.h"

namespace plait::transport::tcp {
namespace {

// A stream gets this many bytes per turn, so that one busy peer does not starve the others.
constexpr size_t kReadBudget = 1u << 20;
// With nothing to do, the thread wakes this often anyway (a safety net, not a mechanism).
constexpr int kIdleWakeMs = 1000;
// How long the destructor waits for goodbyes to be written and peers to close.
constexpr auto kShutdownGrace = std::chrono::seconds(2);

std::string os_error(int err) {
  char buf[256];
  std::string text = strerror_r(err, buf, sizeof buf);
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(text[0]));
  return text;
}

}  // namespace

void TcpFabric::start_progress() {
  epoll_ = net::Fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid()) throw system_error("epoll_create1", errno, {.rank = rank_});
  wake_fd_ = net::Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd_.valid()) throw system_error("eventfd", errno, {.rank = rank_});
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the wake-up fd
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &ev) != 0)
    throw system_error("epoll_ctl", errno, {.rank = rank_});
  for (auto& peer : peers_) {
    if (!peer) continue;
    for (auto& s : peer->streams) {
      ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
      ev.data.ptr = s.get();
      if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, s->fd(), &ev) != 0)
        throw system_error("epoll_ctl", errno, {.rank = rank_});
    }
  }
  progress_ = std::thread([this] {
    // The last line of defence: an exception escaping a thread would terminate the host.
    while (!stop_requested_.load()) {
      try {
        progress_loop();
      } catch (const std::exception& e) {
        log(LogLevel::kError, "rank ", rank_, ": tcp fabric '", name_,
            "': progress thread recovered from: ", e.what());
      }
    }
    try {
      shutdown_streams();
    } catch (const std::exception& e) {
      log(LogLevel::kError, "rank ", rank_, ": tcp fabric '", name_, "': shutdown: ", e.what());
    }
  });
}

void TcpFabric::wake_progress() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof one);
  unpark();
}

void TcpFabric::progress_loop() {
  epoll_event events[64];
  // Only the spin policy busy-polls here. Hybrid spins in CompletionQueue::wait() alone: a
  // spinning progress thread as well doubles the spinners, and on an oversubscribed host
  // (more threads than cores) they then take turns and latency collapses (measured: 8 us
  // blocking vs 400 us with both spinning on 2 shared cores).
  const int busy_timeout = config_.wait_policy == WaitPolicy::kSpin ? 0 : kIdleWakeMs;
  bool backlog = false;
  // The poll-pass count when the park last found nobody polling: a poller count that stays
  // up without passes (a submitter that lent its poll and went off) does not park us again.
  uint64_t idle_at = UINT64_MAX;
  if (keepalive_on()) next_keepalive_ = Clock::now() + keepalive_;
  while (!stop_requested_.load()) {
    Clock::time_point now = Clock::now();
    if (now >= next_keepalive_) keepalive_tick(now);
    // A caller polls the sockets: asleep in epoll we would only be woken for every message
    // it reads anyway (a context switch each, on cores its peers need).
    if (!backlog && may_park() && pollers_.load(std::memory_order_seq_cst) > 0 &&
        poll_passes_.load(std::memory_order_relaxed) != idle_at) {
      const ParkEnd end = park(next_keepalive_);
      if (end == ParkEnd::kIdle) idle_at = poll_passes_.load(std::memory_order_relaxed);
      if (stop_requested_.load()) break;
      if (end == ParkEnd::kTimer) continue;  // the keep-alive is due; then park again
      now = Clock::now();
      // A poller may have left streams past their read budget: their edges are consumed,
      // so epoll would not report them again.
      std::lock_guard rx(rx_mu_);
      backlog = !ready_.empty();
    }
    int timeout_ms = backlog ? 0 : busy_timeout;
    if (timeout_ms > 0 && keepalive_on()) {
      const auto until_tick = std::chrono::ceil<std::chrono::milliseconds>(next_keepalive_ - now);
      timeout_ms = static_cast<int>(std::clamp<int64_t>(until_tick.count(), 0, timeout_ms));
    }
    int n = ::epoll_wait(epoll_.get(), events, 64, timeout_ms);
    if (n < 0) {
      if (errno != EINTR) log(LogLevel::kError, "rank ", rank_, ": epoll_wait: ", os_error(errno));
      n = 0;
    }
    if (n == 0 && busy_timeout == 0 && !backlog) sched_yield();  // idle spinning
    std::lock_guard rx(rx_mu_);
    backlog = serve(events, n);
  }
}

bool TcpFabric::serve(const epoll_event* events, int n) {
  for (int i = 0; i < n; ++i) {
    auto* s = static_cast<Stream*>(events[i].data.ptr);
    if (!s) {
      uint64_t count;
      [[maybe_unused]] ssize_t r = ::read(wake_fd_.get(), &count, sizeof count);
      continue;
    }
    if (!s->receiving) continue;
    if (events[i].events & EPOLLOUT) {
      std::shared_lock guard(report_guard_);  // from the claim to the report
      FinishedOps finished;
      if (s->flush(&finished) != 0) broken_stream_.store(true);
      report_sent(finished);
    }
    if (events[i].events & (EPOLLERR | EPOLLHUP | EPOLLRDHUP)) s->hangup_seen = true;
    if ((events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) && !s->in_ready_list) {
      s->in_ready_list = true;
      ready_.push_back(s);
    }
  }
  if (broken_stream_.load(std::memory_order_relaxed) && broken_stream_.exchange(false)) {
    for (auto& peer : peers_)
      if (peer)
        for (auto& s : peer->streams)
          if (int err = s->send_error(); err != 0 && s->receiving) {
            const std::string why = "connection to rank " + std::to_string(s->peer()) +
                                    " (stream " + std::to_string(s->index()) +
                                    ") failed: " + os_error(err);
            if (!lose_stream(*s, why)) fail_peer(s->peer(), why, false);
          }
  }
  service_ready();
  backlog_.store(!ready_.empty(), std::memory_order_seq_cst);
  return !ready_.empty();
}

void TcpFabric::service_ready() {
  for (size_t i = 0; i < ready_.size();) {
    Stream* s = ready_[i];
    int error = 0;
    Stream::ReadResult result = Stream::ReadResult::kDrained;
    if (s->receiving) {
      try {
        result = s->receive(*this, kReadBudget, &error);
      } catch (const Error& e) {
        fail_peer(s->peer(), e.message(), false);
      } catch (const std::exception& e) {
        fail_peer(s->peer(), std::string("internal error while reading: ") + e.what(), false);
      }
    }
    if (result == Stream::ReadResult::kMore && s->receiving) {
      ++i;
      continue;
    }
    s->in_ready_list = false;
    ready_[i] = ready_.back();
    ready_.pop_back();
    if (result == Stream::ReadResult::kClosed || result == Stream::ReadResult::kError)
      on_stream_closed(*s, result, error);
  }
}

void TcpFabric::on_stream_closed(Stream& s, Stream::ReadResult result, int error) {
  if (!s.receiving) return;  // already closed with its peer
  const std::string peer = std::to_string(s.peer());
  const std::string where = " (stream " + std::to_string(s.index()) + ")";
  if (result == Stream::ReadResult::kClosed && s.goodbye_received()) {
    close_stream(s);
    // Every stream carries its data before its goodbye: once all goodbyes are in, nothing
    // more can arrive from this peer.
    if (++peers_[s.peer()]->goodbyes == live_stream_count(s.peer()))
      fail_peer(s.peer(), shut_down_reason(s.peer(), peers_[s.peer()]->first_loss), true);
    return;
  }
  const std::string why =
      result == Stream::ReadResult::kClosed
          ? "rank " + peer + " closed the connection" + where +
                " without a goodbye (did it exit or crash?)"
          : "connection to rank " + peer + where + " failed: " + os_error(error);
  if (!lose_stream(s, why)) fail_peer(s.peer(), why, false);
}

void TcpFabric::close_stream(Stream& s) {
  s.receiving = false;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s.fd(), nullptr);
  s.close_sending(/*shut_write=*/true);  // a peer waiting for our EOF gets it now
}

void TcpFabric::fail_peer(int peer, const std::string& why, bool orderly) {
  if (!mark_failed(peer, why, orderly)) return;
  Peer& p = *peers_[peer];
  for (auto& s : p.streams)
    if (s->receiving) close_stream(*s);
  p.imm_writes.clear();
  matcher_.drop_incomplete_from(peer);
  // Posted receives are in the op table too.
  fail_all(ops_.select(fails_with(peer, orderly)), why);
}

void TcpFabric::shutdown_streams() {
  // Callers that still poll (they should not, the fabric is going) find the lock taken.
  std::lock_guard rx(rx_mu_);
  // Pending ops are abandoned (stop_reporting() holds back their completions); their frames that
  // are partly written finish from a copy, the rest are dropped.
  {
    std::vector<OpRef> pending = ops_.select([](const Op&) { return true; });
    std::vector<std::unique_lock<FutexMutex>> held;
    for (auto& peer : peers_)
      if (peer)
        for (auto& s : peer->streams) held.push_back(s->lock_sending());
    for (const OpRef& op : pending) op->claim();
    for (auto& peer : peers_)
      if (peer)
        for (auto& s : peer->streams) s->keep_started_frame_locked();
  }

  int open = 0;
  std::string farewell = first_loss();
  if (farewell.size() > kMaxReasonBytes) farewell.resize(kMaxReasonBytes);
  for (auto& peer : peers_) {
    if (!peer) continue;
    for (auto& s : peer->streams) {
      if (!s->receiving) continue;
      ++open;
      Frame goodbye;
      goodbye.header.type = MessageType::kGoodbye;
      goodbye.owned = farewell;
      goodbye.header.length = farewell.size();
      FinishedOps abandoned;  // completions are no longer delivered
      s->submit(std::move(goodbye), &abandoned);
      if (s->idle()) s->close_sending(/*shut_write=*/true);
    }
  }
  auto drained = [&](Stream& s) {
    int error = 0;
    if (s.drain(&error) == Stream::ReadResult::kDrained) return false;
    s.receiving = false;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s.fd(), nullptr);
    --open;
    return true;
  };
  // Edges seen before now are not reported again: look at every stream once first.
  for (auto& peer : peers_)
    if (peer)
      for (auto& s : peer->streams)
        if (s->receiving) drained(*s);
  // Read and drop whatever still comes until every peer closes its side (it does on our
  // goodbye, or on its own shutdown), flushing our goodbyes as the sockets take them.
  const Deadline deadline = Deadline::after(
      std::min<std::chrono::nanoseconds>(kShutdownGrace, config_.timeout));
  epoll_event events[64];
  while (open > 0 && !deadline.expired()) {
    int n = ::epoll_wait(epoll_.get(), events, 64, deadline.remaining_ms());
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      auto* s = static_cast<Stream*>(events[i].data.ptr);
      if (!s) {
        uint64_t count;
        [[maybe_unused]] ssize_t r = ::read(wake_fd_.get(), &count, sizeof count);
        continue;
      }
      if (!s->receiving) continue;
      if (events[i].events & EPOLLOUT) {
        FinishedOps abandoned;
        s->flush(&abandoned);
        if (s->idle()) s->close_sending(/*shut_write=*/true);
      }
      drained(*s);
    }
  }
  if (open > 0)
    log(LogLevel::kInfo, "rank ", rank_, ": tcp fabric '", name_, "': ", open,
        " connection(s) did not close within the shutdown grace period");
}

}  // namespace plait::transport::tcp
