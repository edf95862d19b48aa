#include "coll/stall/stall_inspector.h"

#include <algorithm>
#include <condition_variable>
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

// One watched communicator; touched by the inspector's thread only, but for `closed`.
struct Watched {
  StallWatch w;
  std::chrono::milliseconds tick{1000};
  std::chrono::milliseconds gather{1000};  // how long the gatherer waits for the states
  std::atomic<bool> closed{false};
  Clock::time_point next_look{};
  uint64_t round = 1;
  std::optional<uint64_t> seen_seq;  // the collective in progress when last looked
  Clock::time_point seen_since{};   // when it was first seen in progress
  std::optional<uint64_t> reported_seq;  // the collective a round was opened for
  int64_t requests_seen = 0;        // plait run's request counter, as last read

  std::string key(const std::string& what) const {
    return "stall/" + std::to_string(w.comm_id) + "/" + what;
  }
  std::string round_key(const std::string& what) const {
    return key(std::to_string(round) + "/" + what);
  }
};

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
      std::vector<std::shared_ptr<Watched>> due;
      const auto now = Clock::now();
      for (const auto& w : watched_)
        if (now >= w->next_look) due.push_back(w);
      lock.unlock();
      for (const auto& w : due) {
        if (w->closed.load()) continue;
        try {
          look(*w);
        } catch (const std::exception& e) {
          // The store is gone (the job is ending, or its host died): nothing to compare with.
          log(LogLevel::kInfo, "stall inspector of communicator ", w->w.comm_id,
              " stops: its store failed: ", e.what());
          w->closed.store(true);
        }
      }
      lock.lock();
    }
  }

  void look(Watched& w) {
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
    Store& store = *w.w.store;
    bool open = false;
    if (w.seen_seq && w.reported_seq != w.seen_seq &&
        now - w.seen_since >= w.w.warn) {
      w.reported_seq = w.seen_seq;
      open = true;
    }
    if (w.w.job_store) {
      const int64_t requests = w.w.job_store->add(kInspectRequestKey, 0);
      if (requests > w.requests_seen) {
        store.set(w.round_key("request"), std::to_string(requests));
        open = true;
      }
      w.requests_seen = requests;
    }
    const std::string opened = w.key("R" + std::to_string(w.round));
    if (open) store.set(opened, std::string("1"));
    if (!store.check(opened)) return;

    RankState me;
    me.answered = true;
    me.in_collective = snap.in_collective;
    me.started = snap.started;
    me.current = snap.current;
    me.waited_s = waited;
    store.set(w.round_key("s" + std::to_string(w.w.rank)), encode_state(me));
    std::string summary;
    if (store.add(w.round_key("gatherer"), 1) == 1) {
      summary = gather(w);
      store.set(w.round_key("summary"), summary);
      if (w.w.job_store && store.check(w.round_key("request"))) {
        const std::string request = store.get_string(w.round_key("request"), w.gather);
        w.w.job_store->set(inspect_reply_key(std::stoll(request)),
                           "communicator " + std::to_string(w.w.comm_id) + ": " + summary);
      }
    } else {
      try {
        summary = store.get_string(w.round_key("summary"), 2 * w.gather + w.tick);
      } catch (const Error& e) {
        if (e.category() != ErrorCategory::kTimeout) throw;
        summary = "(no summary: the rank gathering the states did not finish)";
      }
    }
    ++w.round;
    log(LogLevel::kWarn, "stall report, communicator ", w.w.comm_id, " (", w.w.size,
        " ranks): ", summary);
  }

  // The states of every rank, waiting up to w.gather for the missing ones.
  std::string gather(Watched& w) {
    std::vector<RankState> states(static_cast<size_t>(w.w.size));
    std::vector<std::string> keys;
    for (int r = 0; r < w.w.size; ++r) keys.push_back(w.round_key("s" + std::to_string(r)));
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

std::unique_ptr<StallWatchHandle> watch_for_stalls(StallWatch watch) {
  auto w = std::make_shared<Watched>();
  w->tick = std::clamp(watch.warn / 4, std::chrono::milliseconds(100), std::chrono::milliseconds(1000));
  w->gather = std::clamp(4 * w->tick, std::chrono::milliseconds(1000), std::chrono::milliseconds(4000));
  w->next_look = Clock::now() + w->tick;
  // Requests made from now on are answered, earlier ones not (they were not for this one).
  if (watch.job_store) {
    try {
      w->requests_seen = watch.job_store->add(kInspectRequestKey, 0);
    } catch (const Error&) {
      watch.job_store = nullptr;
    }
  }
  w->w = std::move(watch);
  Inspector::get().add(w);
  return std::make_unique<Handle>(std::move(w));
}

}  // namespace plait::coll
