// Who reads the TCP provider's sockets: a caller that waits on one of our completion queues
// reads them itself (Open MPI's model: its progress loop polls the sockets while it waits),
// and the progress thread steps aside meanwhile.
//
// Why: a message handed through the progress thread costs a wake-up (epoll) and a context
// switch on the receiving side, and another on the way back to the waiting caller. On a
// host with fewer cores than busy threads that was most of a small message's time (8 B
// allreduce np=2: ~34 us against Open MPI's 8).
//
// The contract:
//   - One reader at a time: rx_mu_. A poller try-locks it (never waits for the thread); the
//     thread locks it for its turns. Either one runs serve().
//   - While callers poll (pollers_ > 0) the progress thread parks on a private futex, away
//     from the sockets. It looks again after a check period: if no poll pass happened in a
//     whole period, nobody polls any more (a caller submitted and went off to compute), and
//     it takes the sockets back. The period starts at kParkCheckMin and doubles while the
//     callers keep polling, up to kParkCheckMax: an unpolled socket waits at most that.
//   - A poller that goes to sleep with its work not done calls hand_off() first: the thread
//     takes over at once instead of after its check (a wake-up, paid only on the way to
//     sleep, where the sleeper pays one anyway).
//   - Under the block policy nobody polls and the thread never parks.
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>

#include "core/futex.h"
#include "core/log.h"
#include "transport/tcp/tcp_fabric.h"

namespace plait::transport::tcp {
namespace {

// How long the parked thread trusts that callers still poll before it looks. It bounds how
// late a socket nobody polls is read; a shorter period costs more wake-ups while callers
// poll (one per period: at 200 us, 4 ranks on 2 cores made 1.6 context switches per 8 B
// allreduce; doubling up to 1 ms took 8 B np=4 from ~55 to ~48 us).
constexpr auto kParkCheckMin = std::chrono::microseconds(200);
constexpr auto kParkCheckMax = std::chrono::microseconds(1000);

}  // namespace

void TcpFabric::begin_polling() { pollers_.fetch_add(1, std::memory_order_seq_cst); }

void TcpFabric::end_polling() {
  // No wake-up here: a caller usually polls again soon (the submitter waits next, the next
  // call starts). One that sleeps instead calls hand_off(); one that does neither is
  // noticed at the parked thread's next check. Except for streams left past their read
  // budget: their edges are consumed, so the thread would not see them even in epoll.
  if (pollers_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
      backlog_.load(std::memory_order_seq_cst))
    wake_progress();
}

void TcpFabric::hand_off() {
  if (!may_park()) return;
  // seq_cst pairs with park(): it sets parked_ before reading handoff_, we set handoff_
  // before reading parked_; one of us sees the other.
  handoff_.store(true, std::memory_order_seq_cst);
  if (backlog_.load(std::memory_order_seq_cst))
    wake_progress();  // also when it is in epoll, not parked (see end_polling())
  else
    unpark();
}

bool TcpFabric::progress() {
  poll_passes_.fetch_add(1, std::memory_order_relaxed);
  if (stop_requested_.load(std::memory_order_relaxed)) return false;
  std::unique_lock rx(rx_mu_, std::try_to_lock);
  if (!rx.owns_lock()) return false;  // the thread (or another poller) is reading
  try {
    epoll_event events[64];
    int n = ::epoll_wait(epoll_.get(), events, 64, 0);
    if (n < 0) n = 0;  // EINTR; a real failure shows in the progress thread's own wait
    if (n == 0 && ready_.empty()) return false;
    serve(events, n);
    return true;
  } catch (const std::exception& e) {
    // serve() turns errors into failed peers; this is the net under it (a caller's poll
    // must not throw through the completion queue).
    log(LogLevel::kError, "rank ", rank_, ": tcp fabric '", name_, "': inline progress: ",
        e.what());
    return false;
  }
}

TcpFabric::ParkEnd TcpFabric::park(Clock::time_point until) {
  uint64_t passes = poll_passes_.load(std::memory_order_relaxed);
  ParkEnd end = ParkEnd::kWoken;
  std::chrono::microseconds period = kParkCheckMin;
  for (;;) {
    parked_.store(true, std::memory_order_seq_cst);
    const uint32_t seen = park_word_.load(std::memory_order_seq_cst);
    if (stop_requested_.load() || handoff_.exchange(false, std::memory_order_seq_cst)) break;
    futex_wait(&park_word_, seen, period);
    const uint64_t now = poll_passes_.load(std::memory_order_relaxed);
    if (now == passes) {  // a whole period without a poll pass: nobody polls
      end = ParkEnd::kIdle;
      break;
    }
    if (Clock::now() >= until) {
      end = ParkEnd::kTimer;
      break;
    }
    passes = now;
    period = std::min(period * 2, std::chrono::microseconds(kParkCheckMax));
  }
  parked_.store(false, std::memory_order_seq_cst);
  return end;
}

void TcpFabric::unpark() {
  if (parked_.load(std::memory_order_seq_cst)) {
    park_word_.fetch_add(1, std::memory_order_seq_cst);
    futex_wake(&park_word_, INT_MAX);
  }
}

}  // namespace plait::transport::tcp
