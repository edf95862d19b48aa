// What the active collective runs on: its schedule over the fabric (the executor), the
// collective segment (the shm algorithm), or both one stage after the other (the
// hierarchical allreduce with its intra-host stages on a host segment: reduce to the host's
// first rank, that rank's allreduce across hosts, broadcast).
#include "coll/engine/comm_engine.h"
#include "coll/engine/internal.h"
#include "core/reduce.h"

namespace plait::coll {

using namespace engine;

void CommEngine::start_executor(ActiveCollective& run) {
  CollectiveCall& call = *run.call;
  const Signature& sig = run.sig;
  run.on_segment = false;
  ExecPeers peers{.fabric = fabric_.get(), .cq = cq_.get(), .fabric_rank = &fabric_rank_,
                  .comm_id = comm_id_, .sent = &sent_, .received = &received_};
  const size_t elem = dtype_size(call.args.dtype);
  ExecBuffers buffers{.input = call.input, .output = call.output,
                      .scratch = scratch(run.schedule->scratch_count * elem)};
  if (spare_executor_) {
    run.executor = std::move(spare_executor_);
    run.executor->reset(*run.schedule, buffers, sig, peers, rank_, coll_context(call.seq));
  } else {
    run.executor = std::make_unique<ScheduleExecutor>(*run.schedule, buffers, sig, peers, rank_,
                                                       coll_context(call.seq));
  }
  run.executor->start();
}

Signature CommEngine::signature_of(const CollectiveCall& call) {
  Signature sig{.seq = call.seq, .op = call.args.op, .dtype = call.args.dtype,
                .redop = call.args.redop, .root = op_has_root(call.args.op) ? call.args.root : -1};
  switch (call.args.op) {
    case CollOp::kAllgatherv:
    case CollOp::kReduceScatterv:
      for (size_t c : call.args.counts) sig.count += c;
      break;
    case CollOp::kAlltoallv: sig.count = 0; break;
    default: sig.count = call.args.count;
  }
  return sig;
}

void CommEngine::start_on_segment_now(std::unique_ptr<CollectiveCall> call) {
  // Anything unusual (an abort, no segment over every rank) takes the general path, which
  // reports it.
  if (abort_error_ || !segment_ || host_segment_) return start_collective(std::move(call));
  CollectiveCall& c = *call;
  c.work->mark_started();
  const Signature sig = signature_of(c);
  activity_->started(sig);
  segment_run_.start(segment_.get(), c.args, c.input, c.output, next_round_, sig,
                     {.fabric = fabric_.get(), .fabric_rank = &segment_fabric_rank_});
  next_round_ += segment_run_.rounds();
  segment_run_.progress();
  if (segment_run_.done() && !segment_run_.error()) {
    if (c.avg_data && c.avg_count > 0) scale_divide(c.args.dtype, c.avg_data, c.avg_count, c.args.size);
    activity_->finished(c.seq);
    c.work->finish(nullptr);
    recycle(std::move(call));
    return;
  }
  // Left in progress (or failed: the next pass takes the abort notice first): it becomes the
  // active collective, as start_collective() would have made it.
  active_ = active_record(std::move(call));
  active_->sig = sig;
  active_->on_segment = true;
}

void CommEngine::start_on_segment(ActiveCollective& run, const CollArgs& args, void* input,
                                  void* output) {
  run.on_segment = true;
  segment_run_.start(segment_.get(), args, input, output, next_round_, run.sig,
                     {.fabric = fabric_.get(), .fabric_rank = &segment_fabric_rank_,
                      .comm_rank = host_segment_ ? &segment_comm_rank_ : nullptr});
  next_round_ += segment_run_.rounds();
  segment_run_.progress();
}

bool CommEngine::start_next_stage(ActiveCollective& run) {
  switch (run.stage) {
    case Stage::kHostReduce:
      run.stage = Stage::kAcrossHosts;
      start_executor(run);  // empty but for the host's first rank
      return true;
    case Stage::kAcrossHosts: {
      if (!segment_ || !host_segment_) return false;
      run.stage = Stage::kHostBroadcast;
      run.host_args.op = CollOp::kBroadcast;
      CollectiveCall& call = *run.call;
      start_on_segment(run, run.host_args, call.output, call.output);
      return true;
    }
    default: return false;
  }
}

bool CommEngine::active_owes_peers() const {
  // A stage still to come needs this rank on the segment (the broadcast), or its peers
  // there need its reduce: whatever this stage says, somebody drives it soon.
  return segment_run_.owes_peers() || active_->stage == Stage::kHostReduce;
}

bool CommEngine::active_done() const {
  return active_->on_segment ? segment_run_.done() : active_->executor->done();
}

const std::shared_ptr<const Error>& CommEngine::active_error() const {
  return active_->on_segment ? segment_run_.error() : active_->executor->error();
}

std::string CommEngine::active_waiting_for() const {
  return active_->on_segment ? segment_run_.waiting_for() : active_->executor->waiting_for();
}

int CommEngine::active_waited_peer() const {
  return active_->on_segment ? segment_run_.first_waited_peer()
                             : active_->executor->first_waited_peer();
}

}  // namespace plait::coll
