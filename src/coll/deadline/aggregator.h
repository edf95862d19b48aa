// The deadline allreduce's aggregator: a thread on the root rank that collects each step's
// contributions, decides the step at its deadline (or when enough have arrived), reduces
// what it has in rank order and sends the result with the contributor set to every rank.
//
// It reacts to events: Work completions (queued by on_complete callbacks, which must not call
// into a communicator) and the root's own contribution, handed over in process. Contributions
// that arrive after their step was decided are counted late and dropped here.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "coll/deadline/wire.h"
#include "core/clock.h"
#include "plait/deadline_allreduce.h"

namespace plait::deadline {

// Completions, hand-overs and the request to stop, in one queue shared with the callbacks
// (which may outlive the aggregator): the thread takes them in order and drops none.
struct EventQueue {
  enum class Kind { kHeader, kValues, kLocal, kStop };
  struct Event {
    Kind kind;
    int rank;
    uint64_t step;
    size_t chunk = 0;  // kValues
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Event> events;

  void push(Event e) {
    {
      std::lock_guard lock(mu);
      events.push_back(e);
    }
    cv.notify_one();
  }
};

// A step's result as the root's own caller takes it.
struct LocalResult {
  wire::ResultHeader header;
  std::shared_ptr<const std::vector<char>> values;
};

class Aggregator {
 public:
  // The communicators are the aggregator's own: nobody else should hold them (see ~Aggregator).
  Aggregator(std::shared_ptr<Communicator> contributions, std::shared_ptr<Communicator> results,
             const Options& options);
  // Drains first (see run()): late contributions and undelivered results, for at most the
  // communicator's timeout (a rank on a slow link may be seconds behind); past it, it says on
  // stderr what is still missing. Then it cancels what is still posted into its buffers by
  // dropping its communicators, or, where others still hold one, by aborting it.
  ~Aggregator();

  // The root's own contribution to `step` (its values moved in).
  void contribute_local(const wire::ContributionHeader& header, std::vector<char> values);
  // Blocks until `step`'s result is decided; throws the aggregator's error, or a timeout.
  LocalResult take_result(uint64_t step, std::chrono::milliseconds timeout);

 private:
  struct Slot {
    std::vector<char> header = std::vector<char>(sizeof(wire::ContributionHeader));
    wire::ContributionHeader parsed;
    std::vector<char> values;
    WorkPtr header_work;
    std::vector<WorkPtr> chunk_works;
    std::vector<char> chunk_done;
    size_t chunks_done = 0;
    bool present = false;     // its header came before the step was decided
    bool has_values = false;  // it sent values (not only joined)
    bool finished = false;    // header and every chunk here: counted out of `pending`
    bool closed = false;      // its rank left: counted out of `pending`
  };
  struct Step {
    std::vector<Slot> slots;
    int present = 0;
    int pending = 0;  // slots neither finished nor closed (late ones included)
    bool decided = false;
    Clock::time_point first{};
    std::optional<wire::ContributionHeader> shape;  // the first arrival's
    int shape_from = -1;
    wire::Chunking chunking;
  };
  struct PendingSend {
    std::shared_ptr<const std::vector<char>> header, values;
    std::vector<std::pair<int, WorkPtr>> works;  // (rank, work)
  };

  void run();
  // kStop: from here on, the thread drains (see run()).
  void begin_drain();
  void open_step(uint64_t step);
  void handle(const EventQueue::Event& e);
  void check_shape(Step& st, uint64_t step, int rank, const wire::ContributionHeader& h);
  void arrived(Step& st, uint64_t step, int rank);      // its header (or the root's values)
  void chunk_arrived(Step& st, int rank, size_t chunk);
  void finish(Step& st, Slot& slot);
  // The share of the expected values not here (see StepResult::dropped_fraction).
  double missing_share(const Step& st) const;
  // Decides next_ when it is due; returns the time to look again (max: nothing to wait for).
  Clock::time_point try_decide();
  void decide(Step& st, uint64_t step, double missing);
  void fail(const Error& e);
  // A peer's connection failed or it shut down (it finished, or died): the steps go on
  // without it, as without any late rank, and nothing more is sent to it. Steps it leaves
  // done stay until drop_done_steps() (a caller may be handling one of them).
  void rank_gone(int rank, const Error& why);
  // Forgets the decided steps that wait for nothing more: every slot finished or closed, and
  // no receive still posted into a slot's buffers. A rank that left (closed) may still have
  // receives posted, which the engine can yet fill from messages it holds.
  void drop_done_steps();
  static bool receives_done(Step& st);
  void reap_sends();
  // Every decided step has all its contributions and every result was delivered.
  bool drained() const;

  std::shared_ptr<Communicator> contributions_, results_;
  const Options options_;
  const int size_, me_;
  std::shared_ptr<EventQueue> queue_ = std::make_shared<EventQueue>();
  // The root's own contributions, by step, until the thread takes them.
  std::map<uint64_t, std::pair<wire::ContributionHeader, std::vector<char>>> local_;

  // The thread's own state.
  std::map<uint64_t, Step> steps_;
  uint64_t next_ = 0;  // the step to decide next
  Clock::time_point last_result_{};
  std::vector<int> consecutive_misses_;
  std::vector<bool> gone_;
  bool draining_ = false;
  Clock::time_point drain_until_{}, next_report_{};
  std::deque<PendingSend> sends_;

  // Shared with the root's caller, under queue_->mu.
  std::map<uint64_t, LocalResult> decided_;
  std::shared_ptr<const Error> error_;
  bool stop_ = false;  // set with kStop, for a thread that failed and only waits for the end
  std::condition_variable result_cv_;

  std::thread thread_;
};

}  // namespace plait::deadline
