// The worker's completion thread: push writes landing, pull replies, the servers' credits
// and failures, deadlines and the servers' health.
#include <algorithm>
#include <cstring>

#include "core/log.h"
#include "ps/control.h"
#include "ps/ps_work.h"
#include "ps/worker.h"

namespace plait::ps {

void PsWorker::run() {
  constexpr int kBatch = 64;
  rdma::Completion c;
  std::vector<std::shared_ptr<Op>> done;
  while (!stop_.load(std::memory_order_relaxed)) {
    const bool got = cq_->wait(&c, kHealthCheck);
    {
      std::lock_guard lock(mu_);
      if (got) {
        handle(c);
        for (int i = 1; i < kBatch && cq_->poll(&c); ++i) handle(c);
      }
      if (std::chrono::steady_clock::now() >= next_check_) {
        check_health();
        next_check_ = std::chrono::steady_clock::now() + kHealthCheck;
      }
      done.swap(finished_);
    }
    // Outside the lock: deregistration waits for the transport, and a Work's callbacks may
    // run in this thread.
    for (auto& op : done) {
      op->regions.clear();
      op->work->finish(op->error, op->version == UINT64_MAX ? 0 : op->version, op->bytes);
    }
    done.clear();
  }
}

void PsWorker::handle(const rdma::Completion& c) {
  if (aborted_) return;  // everything was failed; these are the cancelled operations
  switch (c.op) {
    case rdma::OpType::kWrite: {
      auto node = pushes_.extract(ctx_id(c.context));
      if (node.empty()) return;
      Task& t = *node.mapped();
      if (!c.ok()) {
        abort(server_error(t.server, *c.error, *t.op), t.op.get());
        return;
      }
      parts_[t.partition].push_in_flight = false;
      on_wire_ -= t.bytes;
      task_done(t, nullptr, UINT64_MAX);
      pump_partition(t.partition);
      pump();
      return;
    }
    case rdma::OpType::kSend: {
      if (c.ok() || ctx_kind(c.context) != Ctx::kRequest) return;
      // The request never reached its server: it is gone (or going).
      auto it = pulls_.find(ctx_id(c.context));
      if (it == pulls_.end()) return;
      abort(server_error(it->second->server, *c.error, *it->second->op), it->second->op.get());
      return;
    }
    case rdma::OpType::kRecv: {
      const int server = static_cast<int>(ctx_id(c.context));
      if (!c.ok()) return;  // the server is gone: check_health() says so
      on_control(c, server);
      if (!aborted_ && !stop_.load()) post_receive(server);
      return;
    }
    case rdma::OpType::kRemoteWriteImm:
      on_reply(c);
      return;
    default:
      return;
  }
}

void PsWorker::on_reply(const rdma::Completion& c) {
  auto where = pull_by_dest_.find({c.key, c.offset});
  if (where == pull_by_dest_.end()) {
    log(LogLevel::kError, "ps worker rank ", rank_, ": a write from rank ", c.peer,
        " into region ", c.key, " at offset ", c.offset, " answers no pull of this worker");
    return;
  }
  auto node = pulls_.extract(where->second);
  pull_by_dest_.erase(where);
  Task& t = *node.mapped();
  // The immediate holds the version's low 32 bits; the version is within 2^31 of this
  // worker's own clock, behind it (others are slower) or ahead of it (with backup workers,
  // rounds go on without a slow worker).
  const uint64_t clock = parts_[t.partition].clock;
  const uint64_t version = wire::version_near(clock, c.imm);
  task_done(t, nullptr, version);
}

void PsWorker::on_control(const rdma::Completion& c, int server) {
  const wire::ToWorker m = wire::decode_to_worker(c.header, inbox_[server].data(), c.bytes);
  switch (m.what) {
    case wire::ToWorker::What::kCredits:
      for (uint32_t i = 0; i < m.count; ++i) {
        const uint32_t slot = m.slot(i);
        if (!slots_[server].give_back(slot))
          log(LogLevel::kError, "ps worker rank ", rank_, ": server rank ", service_.servers[server],
              " handed back slot ", slot, ", which it did not hold");
      }
      pump();
      return;
    case wire::ToWorker::What::kDoneAck:
      acked_[server] = 1;
      return;
    case wire::ToWorker::What::kFailure: {
      auto node = pulls_.extract(m.request);
      if (node.empty()) return;  // answered or failed already
      Task& t = *node.mapped();
      pull_by_dest_.erase({t.request.dest.key, t.request.dest_offset});
      task_done(t,
                std::make_shared<const Error>(m.category, std::string(m.reason),
                                              ErrorContext{.rank = rank_,
                                                           .peer = service_.servers[server],
                                                           .op = t.op->what}),
                UINT64_MAX);
      return;
    }
    case wire::ToWorker::What::kMalformed:
      break;
  }
  log(LogLevel::kError, "ps worker rank ", rank_, ": malformed control message (kind ", c.header,
      ", ", c.bytes, " bytes) from server rank ", service_.servers[server]);
}

void PsWorker::task_done(Task& task, std::shared_ptr<const Error> error, uint64_t version) {
  Op& op = *task.op;
  if (error && !op.error) op.error = std::move(error);
  op.version = std::min(op.version, version);
  if (--op.tasks_left > 0) return;
  auto it = std::find(ops_.begin(), ops_.end(), task.op);
  if (it != ops_.end()) {
    finished_.push_back(std::move(*it));
    ops_.erase(it);
  }
}

void PsWorker::check_health() {
  for (int s = 0; s < service_.num_servers(); ++s) {
    const int rank = service_.servers[s];
    if (!fabric_.peer_failed(rank)) continue;
    auto involves = [&](const auto& tasks) {
      for (const auto& [id, t] : tasks)
        if (t->server == s) return t->op.get();
      return static_cast<Op*>(nullptr);
    };
    Op* op = involves(pushes_);
    if (!op) op = involves(pulls_);
    if (!op && !ready_[s].empty()) op = ready_[s].front()->op.get();
    if (!op) continue;
    abort(remote_error("parameter server rank " + std::to_string(rank) + " failed: " +
                           fabric_.peer_failure(rank),
                       {.rank = rank_, .peer = rank, .op = op->what}),
          op);
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  for (const auto& op : ops_) {
    if (now < op->deadline) continue;
    // Say what it still waits for: the first of its tasks not done.
    std::string waits = "its pushes to wait their turn";
    for (const auto& [id, t] : pulls_)
      if (t->op == op)
        waits = "server rank " + std::to_string(service_.servers[t->server]) +
                "'s reply to the pull of partition " + std::to_string(t->partition) + " at clock " +
                std::to_string(t->request.clock);
    for (int s = 0; s < service_.num_servers(); ++s)
      for (const auto& t : ready_[s])
        if (t->op == op) waits = "a ring slot on server rank " + std::to_string(service_.servers[s]) + " (or room in the push window)";
    for (const auto& [id, t] : pushes_)
      if (t->op == op)
        waits = "its push to server rank " + std::to_string(service_.servers[t->server]) + " to land";
    abort(timeout_error(op->what + " timed out after " + std::to_string(service_.timeout.count()) +
                            " ms waiting for " + waits,
                        {.rank = rank_, .op = op->what}),
          op.get());
    return;
  }
}

void PsWorker::abort(const Error& why, const Op* culprit) {
  log(LogLevel::kError, "ps worker rank ", rank_, ": ", why.what());
  aborted_ = std::make_shared<const Error>(why);
  // From its return nothing more is written into the callers' buffers or read from them.
  fabric_.cancel(*cq_);
  auto others = std::make_shared<const Error>(
      aborted_error("the parameter-server worker stopped: " + why.message(), {.rank = rank_}));
  for (auto& op : ops_) {
    if (!op->error) op->error = op.get() == culprit ? aborted_ : others;
    finished_.push_back(std::move(op));
  }
  ops_.clear();
  pushes_.clear();
  pulls_.clear();
  pull_by_dest_.clear();
  for (auto& q : ready_) q.clear();
  on_wire_ = 0;
  for (auto& p : parts_) {
    p.pushes.clear();
    p.push_in_flight = false;
  }
}

}  // namespace plait::ps
