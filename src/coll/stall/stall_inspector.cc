#include "coll/stall/stall_inspector.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "coll/stall/stall_report.h"
#include "core/clock.h"
#include "core/log.h"
#include "plait/error.h"

namespace plait::coll {
namespace {

constexpr auto kWake = std::chrono::milliseconds(100);

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

// A round this rank takes part in: which, for which of plait run's requests (0: a stall),
// whether this rank opened it, and the state it reports.
struct Round {
  uint64_t number = 0;
  int64_t request = 0;
  bool opened_here = false;
  RankState state;
};

// One watched communicator. The inspector's thread owns the fields but `closed` and
// `round_busy`; a round's thread reads `w`, `tick` and `gather`, which never change.
struct Watched {
  StallWatch w;
  std::chrono::milliseconds tick{1000};
  std::chrono::milliseconds gather{1000};  // how long the gatherer waits for the states
  std::atomic<bool> closed{false};
  std::atomic<bool> round_busy{false};  // a round's store calls are running
  Clock::time_point next_look{};
  uint64_t next_round = 1;  // the round this rank opens next
  uint64_t joined = 0;      // the last round it took part in
  std::optional<uint64_t> seen_seq;       // the collective in progress when last looked
  Clock::time_point seen_since{};         // when it was first seen in progress
  std::optional<uint64_t> reported_seq;   // the collective a round was held for
  int64_t requests_seen = 0;              // plait run's requests, as last read

  std::string round_key(uint64_t round, const std::string& what) const {
    return "stall/" + std::to_string(w.comm_id) + "/" + std::to_string(round) + "/" + what;
  }
};

// The states of every rank, waiting up to w.gather for the missing ones.
std::string gather(const Watched& w, uint64_t round) {
  std::vector<RankState> states(static_cast<size_t>(w.w.size));
  std::vector<std::string> keys;
  for (int r = 0; r < w.w.size; ++r) keys.push_back(w.round_key(round, "s" + std::to_string(r)));
  try {
    w.w.store->wait(keys, w.gather);
  } catch (const Error& e) {
    if (e.category() != ErrorCategory::kTimeout) throw;
  }
  for (int r = 0; r < w.w.size; ++r) {
    if (!w.w.store->check(keys[r])) continue;
    if (auto s = decode_state(w.w.store->get_string(keys[r], w.gather))) states[r] = *s;
  }
  return stall_summary(states);
}

// A round's store calls, on a thread of its own: a slow store holds up this round only.
void run_round(const std::shared_ptr<Watched>& watched, const Round& round) {
  Watched& w = *watched;
  try {
    Store& store = *w.w.store;
    if (round.opened_here) {
      if (round.request > 0) store.set(w.round_key(round.number, "request"), std::to_string(round.request));
      if (w.w.inquire) w.w.inquire(round.number, round.request);
    }
    store.set(w.round_key(round.number, "s" + std::to_string(w.w.rank)), encode_state(round.state));
    std::string summary;
    if (store.add(w.round_key(round.number, "gatherer"), 1) == 1) {
      summary = gather(w, round.number);
      store.set(w.round_key(round.number, "summary"), summary);
      int64_t request = round.request;
      // Opened by another rank for a request this one has not seen: its opener wrote it
      // before its own state, which the gathering waited for.
      if (request == 0 && store.check(w.round_key(round.number, "request")))
        request = std::stoll(store.get_string(w.round_key(round.number, "request"), w.gather));
      if (request > 0 && w.w.job_store)
        w.w.job_store->set(inspect_reply_key(request),
                           "communicator " + std::to_string(w.w.comm_id) + ": " + summary);
    } else {
      try {
        summary = store.get_string(w.round_key(round.number, "summary"), 2 * w.gather + w.tick);
      } catch (const Error& e) {
        if (e.category() != ErrorCategory::kTimeout) throw;
        summary = "(no summary: the rank gathering the states did not finish)";
      }
    }
    log(LogLevel::kWarn, "stall report, communicator ", w.w.comm_id, " (", w.w.size,
        " ranks): ", summary);
  } catch (const std::exception& e) {
    // The store is gone (the job is ending, or its host died): nothing to compare with.
    log(LogLevel::kInfo, "stall inspector of communicator ", w.w.comm_id, " stops: its store failed: ",
        e.what());
    w.closed.store(true);
  }
  w.round_busy.store(false, std::memory_order_release);
}

class Inspector {
 public:
  static Inspector& get() {
    static Inspector inspector;
    return inspector;
  }

  void add(std::shared_ptr<Watched> w) {
    std::lock_guard lock(mu_);
    watched_.push_back(std::move(w));
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }

  ~Inspector() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      coarse_clock_ms.store(steady_ms(), std::memory_order_relaxed);
      cv_.wait_for(lock, kWake);
      coarse_clock_ms.store(steady_ms(), std::memory_order_relaxed);
      std::erase_if(watched_, [](const auto& w) { return w->closed.load(); });
      const auto now = Clock::now();
      for (const auto& w : watched_)
        if (now >= w->next_look) look(w);
    }
  }

  // Local only: reads the activity (and plait run's file), and starts a round's thread when
  // this rank has a reason to report.
  static void look(const std::shared_ptr<Watched>& watched) {
    Watched& w = *watched;
    const auto now = Clock::now();
    w.next_look = now + w.tick;
    const CollectiveActivity::Snapshot snap = w.w.activity->read();
    if (snap.closed) return;  // aborted: its error says what happened
    double waited = 0;
    if (snap.in_collective) {
      if (snap.current.seq != w.seen_seq) {
        w.seen_seq = snap.current.seq;
        // Since its start on the coarse clock, when it ran then; else since now.
        w.seen_since = now;
        const int64_t ago_ms = snap.started_ms > 0 ? steady_ms() - snap.started_ms : 0;
        if (ago_ms > 0) w.seen_since -= std::chrono::milliseconds(ago_ms);
      }
      waited = std::chrono::duration<double>(now - w.seen_since).count();
    } else {
      w.seen_seq.reset();
    }
    if (w.round_busy.load(std::memory_order_acquire)) return;  // one round at a time

    Round round;
    const CollectiveActivity::Inquiry asked = w.w.activity->inquiry();
    int64_t requests = 0;
    if (asked.round > w.joined) {
      round = {.number = asked.round, .request = asked.request};
    } else if (w.seen_seq && w.reported_seq != w.seen_seq && now - w.seen_since >= w.w.warn) {
      round = {.number = w.next_round, .opened_here = true};
    } else if (!w.w.request_file.empty() &&
               (requests = read_stall_requests(w.w.request_file)) > w.requests_seen) {
      round = {.number = w.next_round, .request = requests, .opened_here = true};
    } else {
      return;
    }
    if (w.seen_seq) w.reported_seq = w.seen_seq;  // one report per collective
    w.requests_seen = std::max(w.requests_seen, round.request);
    w.joined = round.number;
    w.next_round = std::max(w.next_round, round.number + 1);
    round.state = RankState{.answered = true,
                            .in_collective = snap.in_collective,
                            .started = snap.started,
                            .current = snap.current,
                            .waited_s = waited};
    w.round_busy.store(true, std::memory_order_relaxed);
    std::thread([watched, round] { run_round(watched, round); }).detach();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::shared_ptr<Watched>> watched_;
  std::thread thread_;
};

class Handle final : public StallWatchHandle {
 public:
  explicit Handle(std::shared_ptr<Watched> w) : w_(std::move(w)) {}
  ~Handle() override { w_->closed.store(true); }

 private:
  std::shared_ptr<Watched> w_;
};

}  // namespace

int64_t read_stall_requests(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!in || !std::getline(in, text)) return 0;
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  return ec == std::errc() && n > 0 ? n : 0;
}

std::unique_ptr<StallWatchHandle> watch_for_stalls(StallWatch watch) {
  auto w = std::make_shared<Watched>();
  w->tick = std::clamp(watch.warn / 4, std::chrono::milliseconds(100), std::chrono::milliseconds(1000));
  w->gather = std::clamp(4 * w->tick, std::chrono::milliseconds(1000), std::chrono::milliseconds(4000));
  w->next_look = Clock::now() + w->tick;
  // Requests made from now on are answered, earlier ones not (they were not for this one).
  if (!watch.request_file.empty()) w->requests_seen = read_stall_requests(watch.request_file);
  w->w = std::move(watch);
  Inspector::get().add(w);
  return std::make_unique<Handle>(std::move(w));
}

}  // namespace plait::coll
