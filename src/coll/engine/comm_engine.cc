#include "coll/engine/comm_engine.h"
#include "coll/engine/internal.h"

#include <cstring>

#include "coll/schedule/tags.h"
#include "core/log.h"
#include "core/reduce.h"

namespace plait::coll {

using namespace engine;

CommEngine::CommEngine(std::shared_ptr<transport::Fabric> fabric, uint32_t comm_id, int rank,
                       std::vector<int> fabric_rank, WaitPolicy policy,
                       std::chrono::microseconds spin_time, bool oversubscribed,
                       std::chrono::milliseconds abort_limit,
                       std::unique_ptr<segment::CollectiveSegment> segment,
                       std::vector<int> segment_members)
    : fabric_(std::move(fabric)),
      cq_(fabric_->create_cq()),
      comm_id_(comm_id),
      rank_(rank),
      fabric_rank_(std::move(fabric_rank)),
      policy_(policy),
      spin_time_(spin_time),
      abort_limit_(abort_limit),
      oversubscribed_(oversubscribed),
      sent_(fabric_rank_.size(), 0),
      received_(fabric_rank_.size(), 0),
      segment_(std::move(segment)),
      control_buf_(kControlBytes) {
  for (size_t r = 0; r < fabric_rank_.size(); ++r) comm_rank_[fabric_rank_[r]] = static_cast<int>(r);
  if (segment_ && !segment_members.empty() &&
      segment_members.size() != fabric_rank_.size()) {
    host_segment_ = true;
    for (int member : segment_members) segment_fabric_rank_.push_back(fabric_rank_[member]);
    segment_comm_rank_ = std::move(segment_members);
  } else {
    segment_fabric_rank_ = fabric_rank_;
  }
  post_control_recv();
  thread_ = std::thread([this] { loop(); });
}

CommEngine::~CommEngine() {
  stop_ = true;
  cq_->interrupt();
  thread_.join();
  std::lock_guard drive(drive_mu_);  // a waiting thread may still be driving
  // Whatever is left never ran: fail it and make sure the fabric forgets our buffers.
  fabric_->cancel(cq_.get());
  auto gone = std::make_shared<const Error>(
      aborted_error("communicator destroyed before the operation completed", {.rank = rank_}));
  if (active_) active_->call->work->finish(gone);
  for (auto& c : queued_) c->work->finish(gone);
  for (auto& [id, p] : p2p_) p.call->work->finish(gone);
  std::lock_guard lock(mu_);
  for (auto& c : submitted_colls_) c->work->finish(gone);
  for (auto& p : submitted_p2p_) p->work->finish(gone);
  delete spare_call_.exchange(nullptr);
}

void CommEngine::submit(std::unique_ptr<CollectiveCall> call) {
  // Nobody drives and nothing waits in the submission queue (calls are submitted in issue
  // order, one at a time): the call joins the run queue directly and starts in this thread,
  // without the queue's lock.
  {
    std::unique_lock drive(drive_mu_, std::try_to_lock);
    if (drive.owns_lock() && submissions_.load(std::memory_order_acquire) == 0 &&
        !aborted_.load(std::memory_order_acquire)) {
      DriverMark mark(driver_);
      begin_driving();
      if (!active_ && queued_.empty() && call->algorithm->algorithm == Algorithm::kShm) {
        // Nothing runs: a collective on the segment starts here, without the run queue and
        // the pass around it (the queue's completions are the engine thread's or the next
        // driver's). A small one is over when this returns.
        guarded([&] { start_on_segment_now(std::move(call)); });
      } else {
        queued_.push_back(std::move(call));
        run_available(/*check_time=*/false);  // the drivers' passes and the engine thread's do
      }
      end_driving(/*lend=*/true);
      return;
    }
  }
  {
    std::lock_guard lock(mu_);
    if (abort_error_) {
      call->work->finish(abort_error_);
      return;
    }
    submitted_colls_.push_back(std::move(call));
    submissions_.fetch_add(1, std::memory_order_release);
  }
  start_or_hand_over();
}

void CommEngine::submit(std::unique_ptr<PointToPointCall> call) {
  {
    std::lock_guard lock(mu_);
    if (abort_error_) {
      call->work->finish(abort_error_);
      return;
    }
    submitted_p2p_.push_back(std::move(call));
    submissions_.fetch_add(1, std::memory_order_release);
  }
  start_or_hand_over();
}

Clock::time_point CommEngine::run_available(bool check_time) {
  guarded([&] { run_available_unguarded(check_time); });
  return check_time ? next_deadline() : Clock::time_point::max();
}

template <typename Body>
void CommEngine::guarded(Body&& body) {
  // Nothing may escape: this runs on the engine thread (an exception would terminate the
  // process) and in user threads that lent themselves. A failure here, e.g. no memory for a
  // schedule's scratch, fails the operation and aborts the communicator.
  try {
    body();
  } catch (const std::exception& e) {
    log(LogLevel::kError, "rank ", rank_, ": communicator engine: ", e.what());
    Culprit culprit;
    if (active_)
      culprit = {active_->call->work,
                 std::make_shared<const Error>(aborted_error(
                     std::string("internal failure: ") + e.what(),
                     {.rank = rank_, .op = std::string(to_string(active_->call->args.op)),
                      .seq = static_cast<int64_t>(active_->call->seq)}))};
    do_abort(std::string("rank ") + std::to_string(rank_) + ": " + e.what(), true, culprit);
  }
}

void CommEngine::run_available_unguarded(bool check_time) {
  // The flag spares a spinning driver the lock of an empty submission queue on every pass.
  if (submissions_.load(std::memory_order_acquire) != 0) {
    poll_cq_as_driver();  // posts may complete at once
    take_submissions();
  }
  for (;;) {
    bool progressed = false;
    if (!active_ && !queued_.empty()) {
      if (queued_.front()->algorithm->algorithm != Algorithm::kShm) poll_cq_as_driver();
      start_next_collective();
      progressed = true;
    }
    if (active_ && active_->on_segment && segment_run_.progress()) progressed = true;
    transport::Completion c;
    if (active_ && active_done()) {
      // A peer's failure seen on the segment: its abort notice, sent before it left, may be
      // waiting in the queue, and it says why (the failure only says that it left).
      if (active_->on_segment && segment_run_.error()) {
        poll_cq_as_driver();
        while (active_ && cq_->poll(&c)) dispatch(c);
      }
      if (active_ && (active_error() || !start_next_stage(*active_))) finish_collective();
      continue;
    }
    // A collective on the segment needs no completion: while only it runs, or nothing does,
    // a driver looks at the queue (and the provider polled through it) every 16th pass.
    // The engine thread looks whenever it is woken: a completion may be what woke it.
    if (driving_ && (!active_ || active_->on_segment) && p2p_.empty() && (++passes_ & 15) != 0) {
      if (!progressed) break;
      continue;
    }
    poll_cq_as_driver();
    while (cq_->poll(&c)) {
      dispatch(c);
      progressed = true;
    }
    if (!progressed) break;
  }
  if (check_time) check_deadlines();
}


void CommEngine::take_submissions() {
  std::string abort_reason;
  bool abort_now = false;
  {
    std::lock_guard lock(mu_);
    submissions_.store(0, std::memory_order_relaxed);
    while (!submitted_colls_.empty()) {
      queued_.push_back(std::move(submitted_colls_.front()));
      submitted_colls_.pop_front();
    }
    // Swapped into a member: a fresh std::deque allocates even when empty.
    if (!submitted_p2p_.empty()) taken_p2p_.swap(submitted_p2p_);
    if (abort_requested_) {
      abort_now = true;
      abort_requested_ = false;
      abort_reason = abort_request_;
    }
  }
  while (!taken_p2p_.empty()) {
    std::unique_ptr<PointToPointCall> call = std::move(taken_p2p_.front());
    taken_p2p_.pop_front();
    post(std::move(call));
  }
  if (abort_now) do_abort(abort_reason, true);
}

char* CommEngine::scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

std::unique_ptr<CollectiveCall> CommEngine::new_call() {
  if (CollectiveCall* spare = spare_call_.exchange(nullptr, std::memory_order_acquire))
    return std::unique_ptr<CollectiveCall>(spare);
  return std::make_unique<CollectiveCall>();
}

void CommEngine::recycle(std::unique_ptr<CollectiveCall> call) {
  call->work.reset();  // the user's Work lives on as long as the user holds it
  call->temp.reset();
  CollectiveCall* empty = nullptr;
  if (spare_call_.compare_exchange_strong(empty, call.get(), std::memory_order_release))
    call.release();
}

void CommEngine::start_next_collective() {
  std::unique_ptr<CollectiveCall> next = std::move(queued_.front());
  queued_.pop_front();
  start_collective(std::move(next));
}

std::unique_ptr<CommEngine::ActiveCollective> CommEngine::active_record(
    std::unique_ptr<CollectiveCall> call) {
  std::unique_ptr<ActiveCollective> active =
      spare_active_ ? std::move(spare_active_) : std::make_unique<ActiveCollective>();
  active->call = std::move(call);
  active->deadline_armed = false;
  active->deadline = Deadline(Clock::time_point::max());
  active->stage = Stage::kWhole;
  active->on_segment = false;
  return active;
}

void CommEngine::start_collective(std::unique_ptr<CollectiveCall> next) {
  std::unique_ptr<ActiveCollective> active = active_record(std::move(next));
  CollectiveCall& call = *active->call;
  if (abort_error_) {
    call.work->finish(abort_error_);
    return;
  }
  // Only a failure needs the context (its string would cost every call).
  auto ctx = [&] {
    return ErrorContext{.rank = rank_, .op = std::string(to_string(call.args.op)),
                        .seq = static_cast<int64_t>(call.seq)};
  };
  const bool on_segment = call.algorithm->algorithm == Algorithm::kShm;
  if (on_segment && (!segment_ || host_segment_)) {
    call.work->finish(std::make_shared<const Error>(invalid_usage(
        "the shm algorithm needs a collective segment, and this communicator has none (its "
        "ranks are on several hosts, or PLAIT_SHM_COLL=off)",
        ctx())));
    return;
  }
  try {
    if (!on_segment) active->schedule = schedules_.get(*call.algorithm, call.args);
  } catch (const Error& e) {
    call.work->finish(std::make_shared<const Error>(e.with_context(ctx())));
    return;
  } catch (const std::exception& e) {
    call.work->finish(std::make_shared<const Error>(
        invalid_usage(std::string("cannot build the schedule: ") + e.what(), ctx())));
    return;
  }
  // Active from here: if what follows throws, loop() fails this call's Work and aborts.
  call.work->mark_started();
  active_ = std::move(active);
  ActiveCollective* run = active_.get();
  run->sig = signature_of(call);
  activity_->started(run->sig);
  run->on_segment = on_segment;
  if (on_segment) return start_on_segment(*run, call.args, call.input, call.output);
  if (call.args.intra_on_segment) {
    // The host's ranks, numbered as the segment numbers them; the stages reduce to its
    // first rank and broadcast from it.
    CollArgs& host = run->host_args;
    host.rank = segment_ ? segment_->rank() : 0;
    host.size = segment_ ? segment_->size() : 1;
    host.dtype = call.args.dtype;
    host.redop = call.args.redop;
    host.root = 0;
    host.count = call.args.count;
    host.in_place = call.args.in_place;
    run->stage = Stage::kHostReduce;
    if (segment_ && host_segment_) {
      host.op = CollOp::kReduce;
      return start_on_segment(*run, host, call.input, call.output);
    }
    run->stage = Stage::kAcrossHosts;  // alone on its host: the schedule copies
  }
  start_executor(*run);
}

void CommEngine::finish_collective() {
  CollectiveCall& call = *active_->call;
  const auto& error = active_error();
  if (error) {
    // Other steps of this collective may still have receives in flight into its buffers:
    // the abort cancels them before the Work is failed.
    ErrorContext ctx{.rank = rank_, .op = std::string(to_string(call.args.op)),
                     .seq = static_cast<int64_t>(call.seq)};
    const ErrorContext& step = error->context();
    std::shared_ptr<const Error> full;
    if (step.op == "send" || step.op == "recv") {
      // One of its messages failed (a peer died, say): the error is the collective's, and
      // names the message in its text ("allreduce #7 with peer 3: recv from rank 3 (...)").
      ctx.peer = step.peer;
      std::string what = step.op + (step.op == "send" ? " to" : " from") + " rank " +
                         std::to_string(step.peer) +
                         (step.bytes >= 0 ? " (" + std::to_string(step.bytes) + " bytes)" : "") +
                         ": " + error->message();
      full = std::make_shared<const Error>(error->category(), std::move(what), ctx);
    } else {
      full = std::make_shared<const Error>(error->with_context(ctx));
    }
    log(LogLevel::kError, full->what());
    do_abort(full->what(), true, {call.work, full});
    return;
  }
  activity_->finished(call.seq);
  std::unique_ptr<ActiveCollective> done = std::move(active_);
  if (call.avg_data && call.avg_count > 0)
    scale_divide(call.args.dtype, call.avg_data, call.avg_count, call.args.size);
  call.work->finish(nullptr);
  if (done->executor) spare_executor_ = std::move(done->executor);
  done->schedule.reset();
  recycle(std::move(done->call));
  spare_active_ = std::move(done);
}

void CommEngine::post(std::unique_ptr<PointToPointCall> call) {
  if (abort_error_) {
    call->work->finish(abort_error_);
    return;
  }
  const uint64_t id = next_p2p_id_++;
  const uint64_t context = (kP2pContext << kKindShift) | id;
  const uint64_t tag = make_tag(comm_id_, TagKind::kPointToPoint, call->tag);
  const int peer = call->peer == transport::kAnySource ? transport::kAnySource
                                                        : fabric_rank_[call->peer];
  PointToPointCall* raw = call.get();
  raw->work->mark_started();
  p2p_[id] = ActivePointToPoint{std::move(call), Deadline::after(raw->timeout)};
  try {
    if (raw->is_send)
      fabric_->send(peer, raw->buffer, raw->bytes, tag, 0, cq_.get(), context);
    else
      fabric_->recv(peer, raw->buffer, raw->bytes, tag, cq_.get(), context);
  } catch (const Error& e) {
    auto it = p2p_.find(id);
    it->second.call->work->finish(std::make_shared<const Error>(
        e.with_context({.rank = rank_, .peer = raw->peer, .op = raw->is_send ? "send" : "recv"})));
    p2p_.erase(it);
  }
}

void CommEngine::dispatch(const transport::Completion& c) {
  const uint64_t kind = c.context >> kKindShift;
  if (kind == kCollContext) {
    // A stale completion of an earlier, failed one, or of none running on the fabric now.
    if (!active_ || active_->on_segment || !active_->executor) return;
    if (((c.context >> 32) & kGenerationMask) != (active_->call->seq & kGenerationMask)) return;
    active_->executor->on_completion(c);
    return;
  }
  if (kind == kP2pContext) {
    auto it = p2p_.find(c.context & ((uint64_t{1} << kKindShift) - 1));
    if (it == p2p_.end()) return;
    PointToPointCall& call = *it->second.call;
    if (c.ok()) {
      call.work->finish(nullptr, comm_rank_of(c.peer), c.bytes);
    } else {
      auto error = std::make_shared<const Error>(c.error->with_context(
          {.rank = rank_, .peer = call.peer, .op = call.is_send ? "send" : "recv",
           .bytes = static_cast<int64_t>(call.bytes)}));
      call.work->finish(error);
    }
    p2p_.erase(it);
    return;
  }
  if (kind == kControlContext && c.op == transport::OpType::kRecv) {
    if (!c.ok()) return control_recv_failed();
    on_control_message(c);
  }
}

void CommEngine::check_deadlines() {
  const auto now = Clock::now();
  if (active_ && !active_done() && !active_->deadline_armed) {
    active_->deadline = Deadline(now + active_->call->timeout);
    active_->deadline_armed = true;
  } else if (active_ && !active_done() && active_->deadline.at() <= now) {
    CollectiveCall& call = *active_->call;
    ErrorContext ctx{.rank = rank_, .peer = active_waited_peer(),
                     .op = std::string(to_string(call.args.op)),
                     .seq = static_cast<int64_t>(call.seq)};
    auto error = std::make_shared<const Error>(timeout_error(
        "Timed out after " + std::to_string(call.timeout.count()) + " ms waiting for " +
            active_waiting_for(),
        ctx));
    log(LogLevel::kError, error->what());
    do_abort(error->what(), true, {call.work, error});
    return;
  }
  for (auto& [id, p] : p2p_) {
    if (p.deadline.at() > now) continue;
    PointToPointCall& call = *p.call;
    auto error = std::make_shared<const Error>(timeout_error(
        "Timed out after " + std::to_string(call.timeout.count()) + " ms (tag " +
            std::to_string(call.tag) + ")",
        {.rank = rank_, .peer = call.peer, .op = call.is_send ? "send" : "recv",
         .bytes = static_cast<int64_t>(call.bytes)}));
    log(LogLevel::kError, error->what());
    do_abort(error->what(), true, {call.work, error});  // cancels the others too
    return;
  }
}

Clock::time_point CommEngine::next_deadline() const {
  auto t = Clock::time_point::max();
  if (active_) t = std::min(t, active_->deadline.at());  // max until armed
  for (const auto& [id, p] : p2p_) t = std::min(t, p.deadline.at());
  return t;
}

int CommEngine::comm_rank_of(int fabric_rank) const {
  auto it = comm_rank_.find(fabric_rank);
  return it == comm_rank_.end() ? -1 : it->second;
}

}  // namespace plait::coll
