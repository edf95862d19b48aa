// The engine behind one Communicator: runs collectives one at a time, in issue order, posts
// point-to-point operations as soon as they arrive, enforces every deadline, and turns any
// failure into an abort that reaches every peer through a control channel.
//
// Who runs it: whoever holds drive_mu_. That is the caller itself when it submits (the
// operation starts in the caller's thread) and when it waits under the spin or hybrid policy
// (it polls the completion queue, and with it an inline-progress provider, until its Work is
// done or its spin budget is spent); otherwise the engine's own thread, which only ever
// sleeps without the lock and never spins. So a small collective on an idle communicator
// completes without any thread hand-off, and one left running in the background still
// progresses.
//
// Ownership: the engine owns its completion queue and shares the fabric with the other
// communicators split from the same parent. Buffers in calls belong to the user until the
// call's Work completes; after an abort, fabric.cancel() guarantees no byte is written to
// them any more.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "coll/engine/activity.h"
#include "coll/engine/internal.h"
#include "coll/schedule/cache.h"
#include "coll/schedule/executor.h"
#include "coll/segment/segment_run.h"
#include "coll/select/algorithms.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/futex_mutex.h"
#include "core/work_impl.h"
#include "transport/fabric.h"

namespace plait::coll {

struct CollectiveCall {
  CollArgs args;
  const AlgorithmInfo* algorithm = nullptr;
  uint64_t seq = 0;
  void* input = nullptr;
  void* output = nullptr;
  std::unique_ptr<char[]> temp;  // stands in for buffers the caller did not supply
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<WorkImpl> work;
  // kAvg: divide these elements by `avg_divisor` once the sum is complete.
  void* avg_data = nullptr;
  size_t avg_count = 0;
};

struct PointToPointCall {
  bool is_send = true;
  void* buffer = nullptr;
  size_t bytes = 0;
  int peer = -1;  // communicator rank, or kAnySource for a recv
  uint32_t tag = 0;
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<WorkImpl> work;
};

class CommEngine final : public WorkDriver {
 public:
  // `abort_limit`: how long abort() waits for the thread driving the engine to carry it out.
  // `segment`: a collective segment, or null. Over every rank (`segment_members` empty: all
  // ranks on one host) the "shm" algorithms run over it; over this rank's host only
  // (`segment_members`: the host's communicator ranks in segment order) the hierarchical
  // allreduce runs its intra-host stages there (CollArgs::intra_on_segment).
  CommEngine(std::shared_ptr<transport::Fabric> fabric, uint32_t comm_id, int rank,
             std::vector<int> fabric_rank, WaitPolicy policy, std::chrono::microseconds spin_time,
             bool oversubscribed, std::chrono::milliseconds abort_limit,
             std::unique_ptr<segment::CollectiveSegment> segment = nullptr,
             std::vector<int> segment_members = {});
  ~CommEngine();
  CommEngine(const CommEngine&) = delete;
  CommEngine& operator=(const CommEngine&) = delete;

  void submit(std::unique_ptr<CollectiveCall> call);
  void submit(std::unique_ptr<PointToPointCall> call);
  // A call to fill in and submit: the last finished one's memory when there is one (its
  // fields are the caller's to set; args keeps its vectors' capacity).
  std::unique_ptr<CollectiveCall> new_call();
  // Aborts (once) and tells the peers. Returns after every pending operation has been
  // cancelled in the fabric and failed, so the caller may free its buffers; throws
  // Error(kTimeout) if the thread driving the engine does not carry the abort out in time.
  void abort(const std::string& reason);
  // Null while healthy; the abort's error afterwards.
  std::shared_ptr<const Error> abort_error() const;
  // Tells every live peer that this rank opened stall-report round `round` (for `plait run`'s
  // request `request`, or 0); their inspectors join it (activity()->inquiry()). Never blocks.
  void send_stall_inquiry(uint64_t round, int64_t request);

  // WorkDriver: a waiting user thread runs the engine.
  Clock::time_point drive(const WorkImpl& work, std::chrono::milliseconds limit) override;
  void drive_once() override;
  void drive_in_background() override;

  const std::shared_ptr<transport::Fabric>& fabric() const { return fabric_; }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(fabric_rank_.size()); }
  uint32_t comm_id() const { return comm_id_; }
  // What collective this rank is in, for the stall inspector.
  const std::shared_ptr<CollectiveActivity>& activity() const { return activity_; }
  int fabric_rank(int comm_rank) const { return fabric_rank_[comm_rank]; }

 private:
  // Runs on the collective segment (segment_run_) or on `executor` over the fabric; a
  // hierarchical allreduce with its intra-host stages on a host segment runs on both, one
  // stage after the other (Stage).
  enum class Stage : uint8_t { kWhole, kHostReduce, kAcrossHosts, kHostBroadcast };
  struct ActiveCollective {
    std::unique_ptr<CollectiveCall> call;
    std::shared_ptr<const Schedule> schedule;  // null: the shm algorithm
    std::unique_ptr<ScheduleExecutor> executor;
    Stage stage = Stage::kWhole;
    bool on_segment = false;  // the current stage runs on segment_run_
    Signature sig;
    CollArgs host_args;  // the host stages' shape: the host's ranks, numbered as the segment
    // Armed by the first deadline check (a call that ends sooner never reads the clock).
    bool deadline_armed = false;
    Deadline deadline{Clock::time_point::max()};
  };
  struct ActivePointToPoint {
    std::unique_ptr<PointToPointCall> call;
    Deadline deadline{Clock::now()};
  };

  void loop();
  void start_or_hand_over();
  // Does all that can be done now without waiting: new calls, the next collective,
  // completions, deadlines. Never throws (a failure aborts). Returns when it next must look.
  // drive_mu_ held.
  // `check_time`: also enforce deadlines (reads the clock); a spinning driver does it
  // every few dozen passes only.
  Clock::time_point run_available(bool check_time = true);
  void run_available_unguarded(bool check_time);
  // Runs `body`; an exception fails the active operation and aborts (never escapes).
  template <typename Body>
  void guarded(Body&& body);
  void take_submissions();
  void start_next_collective();
  void start_collective(std::unique_ptr<CollectiveCall> call);
  // The record of a collective about to run: the last one's memory when there is one.
  std::unique_ptr<ActiveCollective> active_record(std::unique_ptr<CollectiveCall> call);
  void start_on_segment(ActiveCollective& run, const CollArgs& args, void* input, void* output);
  // A shm collective submitted with nothing running: starts in the caller, and ends there
  // without an ActiveCollective when the flags allow at once (its peers arrived first).
  void start_on_segment_now(std::unique_ptr<CollectiveCall> call);
  static Signature signature_of(const CollectiveCall& call);
  void start_executor(ActiveCollective& run);
  // A staged run's next stage that has work for this rank; false when none is left.
  bool start_next_stage(ActiveCollective& run);
  // Whether peers may wait for a flag of ours in the active collective (end_driving).
  bool active_owes_peers() const;
  void finish_collective();
  // The active collective's run, whichever kind it is.
  bool active_done() const;
  const std::shared_ptr<const Error>& active_error() const;
  std::string active_waiting_for() const;
  int active_waited_peer() const;
  // A thread starts or stops driving (the completion queue's polling, and the segment's:
  // while some thread of ours polls, no peer rings our bell).
  void begin_driving();
  // `lend`: the caller submitted and is about to wait; its collective on the segment, if not
  // done, is lent to that wait: peers do not ring us meanwhile, or only after a grace period
  // when they may need our next flag (RankControl::ring_after).
  void end_driving(bool lend = false);
  // A driver counts as the completion queue's active poller (completions then wake no
  // thread) from its first look at the queue on: a collective on the segment that ends
  // sooner needs the queue not at all. drive_mu_ held.
  void poll_cq_as_driver();
  // What publishers on the segment read to decide whether to ring us (RankControl::
  // ring_after); drive_mu_ held.
  void ring_after(int64_t when);
  Clock::time_point take_over_lent_poll();
  // The engine thread's sleep, on the completion queue and on the segment's bell.
  void sleep_until(Clock::time_point wake, uint32_t bell_seen);
  void post(std::unique_ptr<PointToPointCall> call);
  void dispatch(const transport::Completion& c);
  void check_deadlines();
  // The operation whose failure causes an abort, and its own error (the others get the
  // abort's). It is failed only after the fabric has cancelled everything.
  struct Culprit {
    std::shared_ptr<WorkImpl> work;
    std::shared_ptr<const Error> error;
  };
  void do_abort(const std::string& reason, bool notify_peers, const Culprit& culprit = {});
  void post_control_recv();
  void control_recv_failed();
  void on_control_message(const transport::Completion& c);
  Clock::time_point next_deadline() const;
  int comm_rank_of(int fabric_rank) const;
  char* scratch(size_t bytes);

  std::shared_ptr<transport::Fabric> fabric_;
  std::unique_ptr<transport::CompletionQueue> cq_;
  const uint32_t comm_id_;
  const int rank_;
  const std::vector<int> fabric_rank_;
  std::unordered_map<int, int> comm_rank_;

  const WaitPolicy policy_;
  const std::chrono::microseconds spin_time_;
  const std::chrono::milliseconds abort_limit_;

  // Held by whoever runs the engine; never held while sleeping (see the top of this file).
  FutexMutex drive_mu_;
  std::atomic<std::thread::id> driver_{};  // the thread holding drive_mu_, for re-entry checks
  // More ranks on this host than cores: a spinning driver yields often, so that the peer it
  // waits for gets the core.
  bool oversubscribed_ = false;
  std::atomic<uint32_t> submissions_{0};  // nonzero: take_submissions() has work (or an abort)
  std::atomic<bool> aborted_{false};      // abort_error_ is set (readable without mu_)

  // Shared with user threads.
  mutable std::mutex mu_;
  std::deque<std::unique_ptr<CollectiveCall>> submitted_colls_;
  std::deque<std::unique_ptr<PointToPointCall>> submitted_p2p_;
  std::string abort_request_;
  bool abort_requested_ = false;
  uint64_t aborts_handled_ = 0;
  std::condition_variable abort_done_;
  std::shared_ptr<const Error> abort_error_;
  bool abort_finished_ = false;  // the abort has cancelled and failed everything
  std::atomic<bool> stop_{false};

  // Guarded by drive_mu_.
  std::deque<std::unique_ptr<CollectiveCall>> queued_;
  // Has an executor whenever set (start_next_collective creates both before returning; if it
  // throws in between, loop() aborts, which clears it).
  std::unique_ptr<ActiveCollective> active_;
  std::shared_ptr<CollectiveActivity> activity_ = std::make_shared<CollectiveActivity>();
  std::unique_ptr<ScheduleExecutor> spare_executor_;  // the last one, kept for its memory
  std::unique_ptr<ActiveCollective> spare_active_;    // likewise
  // A finished call for new_call(), handed over without a lock (taken by any thread).
  std::atomic<CollectiveCall*> spare_call_{nullptr};
  void recycle(std::unique_ptr<CollectiveCall> call);
  std::deque<std::unique_ptr<PointToPointCall>> taken_p2p_;
  std::unordered_map<uint64_t, ActivePointToPoint> p2p_;
  uint64_t next_p2p_id_ = 1;
  std::vector<uint64_t> sent_, received_;  // collective messages per peer (tags.h)
  std::vector<char> scratch_;
  ScheduleCache schedules_;
  std::unique_ptr<segment::CollectiveSegment> segment_;  // null: no "shm" algorithms
  bool host_segment_ = false;  // segment_ spans this rank's host only, not every rank
  // Segment rank -> fabric rank, and -> communicator rank (names in errors).
  std::vector<int> segment_fabric_rank_, segment_comm_rank_;
  segment::SegmentRun segment_run_;  // the active collective's, when it runs on the segment
  uint64_t next_round_ = 1;          // the segment's rounds, counted alike on every rank
  bool driving_ = false;     // a thread that will poll holds drive_mu_ (begin_driving)
  bool polling_cq_ = false;  // and it counts as the queue's active poller
  bool poll_credit_ = false;  // a submitter left its run to the wait it is about to begin
  uint64_t credits_lent_ = 0;                     // how many times, so far
  uint64_t credit_seen_ = 0;                      // the engine thread saw the last one
  Clock::time_point credit_seen_at_{};            // at this time
  std::atomic<bool> background_{false};  // a Work wants a callback: nobody will wait for it
  uint32_t passes_ = 0;       // run_available passes, to poll the queue now and then
  std::vector<char> control_buf_;
  bool last_control_recv_ = false;  // posted after every member had gone (drive_mu_)
  std::string abort_notice_;  // the text sent to peers; lives until the sends are done
  // The stall inquiries sent, one per round this rank opened: they live as long as the engine
  // (a send may still read one), and a deque never moves them. Under mu_.
  std::deque<engine::StallInquiryWire> inquiries_;
  std::thread thread_;
};

}  // namespace plait::coll
