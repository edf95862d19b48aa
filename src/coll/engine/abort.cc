// The engine's failure path: abort() from any thread, and the order in which an abort
// cancels, fails and tells the peers (docs/errors.md). Their notices arrive on the control
// channel (engine_control.cc).
#include "coll/engine/comm_engine.h"
#include "coll/engine/internal.h"
#include "coll/schedule/tags.h"
#include "core/log.h"

namespace plait::coll {

using namespace engine;

void CommEngine::abort(const std::string& reason) {
  if (driver_.load(std::memory_order_relaxed) == std::this_thread::get_id()) {
    do_abort(reason, true);  // called from inside a pass (drive_mu_ is ours already)
    return;
  }
  {
    std::unique_lock drive(drive_mu_, std::try_to_lock);
    if (drive.owns_lock()) {
      DriverMark mark(driver_);
      do_abort(reason, true);
      return;
    }
  }
  // Someone drives (possibly spinning for a long time): ask them, and wait until the
  // cancellation is through, so that the caller may free its buffers when we return.
  std::unique_lock lock(mu_);
  if (!abort_error_) {
    abort_requested_ = true;
    abort_request_ = reason;
    submissions_.fetch_add(1, std::memory_order_release);
    cq_->interrupt();
  }
  // Whoever drives takes the request within one pass, and the engine thread looks at least
  // every kMaxSleep: only a driver stuck outside the engine (a Work callback that never
  // returns) keeps us waiting this long.
  if (!abort_done_.wait_for(lock, abort_limit_, [&] { return abort_finished_; }))
    throw timeout_error("Timed out after " + std::to_string(abort_limit_.count()) +
                            " ms waiting for the abort to cancel the pending operations: the "
                            "thread driving the communicator does not return (a Work "
                            "callback that blocks?); their buffers may still be in use",
                        {.rank = rank_, .op = "abort"});
}

std::shared_ptr<const Error> CommEngine::abort_error() const {
  std::lock_guard lock(mu_);
  return abort_error_;
}

// The order is the promise of docs/errors.md: first the fabric cancels every operation of
// this communicator and guarantees no further access to their buffers, then the Works fail
// (a waiter released by the failure may free its buffer at once), then abort() returns.
void CommEngine::do_abort(const std::string& reason, bool notify_peers, const Culprit& culprit) {
  {
    std::lock_guard lock(mu_);
    if (abort_error_) {
      // Aborted before: everything pending was cancelled and failed then.
      if (culprit.work) culprit.work->finish(culprit.error);
      return;
    }
    abort_error_ = std::make_shared<const Error>(
        aborted_error("communicator aborted: " + reason, {.rank = rank_}));
    aborted_.store(true, std::memory_order_release);
  }
  activity_->close();  // nothing more to inspect: the abort says what went wrong
  fabric_->cancel(cq_.get());
  // A collective on the segment touches user memory only inside progress(), in the driving
  // thread: once it is no longer active nothing does. Peers need not ring us any more.
  if (segment_) segment_->own().active_round.store(segment::kNoRound, std::memory_order_seq_cst);
  if (culprit.work) culprit.work->finish(culprit.error);  // the first finish wins
  const auto& error = abort_error_;  // set once, above; never changes afterwards
  if (active_) {
    active_->call->work->finish(error);
    active_.reset();
  }
  for (auto& c : queued_) c->work->finish(error);
  queued_.clear();
  for (auto& [id, p] : p2p_) p.call->work->finish(error);
  p2p_.clear();
  {
    std::lock_guard lock(mu_);
    for (auto& c : submitted_colls_) c->work->finish(error);
    submitted_colls_.clear();
    for (auto& p : submitted_p2p_) p->work->finish(error);
    submitted_p2p_.clear();
    abort_finished_ = true;
  }
  abort_done_.notify_all();
  if (!notify_peers) return;
  abort_notice_ = reason.substr(0, kControlBytes);
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank_ || fabric_->peer_failed(fabric_rank_[peer])) continue;
    try {
      fabric_->send(fabric_rank_[peer], abort_notice_.data(), abort_notice_.size(),
                    make_tag(comm_id_, TagKind::kControl, 0), kAbortNotice, cq_.get(),
                    (kControlContext << kKindShift) | 1);
    } catch (const Error&) {
      // The peer is unreachable; it learns of the failure from its own transport.
    }
  }
}

}  // namespace plait::coll
