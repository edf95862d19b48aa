// The worker's calls and the writes and requests they turn into. Its completion thread, and
// what it does with the servers' answers, are in worker_completions.cc.
#include <algorithm>
#include <cstring>

#include "core/log.h"
#include "ps/ps_work.h"
#include "ps/worker.h"

namespace plait::ps {
namespace {

std::string_view op_name(OpKind kind) {
  switch (kind) {
    case OpKind::kPush: return "ps push";
    case OpKind::kPull: return "ps pull";
    case OpKind::kPushPull: return "ps push_pull";
  }
  return "ps";
}

}  // namespace

PsWorker::PsWorker(rdma::Fabric& fabric, const Service& service, int index, const KeyTable& keys)
    : fabric_(fabric),
      keys_(keys),
      service_(service),
      index_(index),
      rank_(service.workers[index]),
      cq_(fabric.create_cq()),
      inbox_(service.num_servers()),
      ready_(service.num_servers()) {
  // Pull replies land in the callers' buffers with an immediate: one queue takes everything.
  fabric_.set_imm_cq(cq_.get());
  for (int s = 0; s < service_.num_servers(); ++s) slots_.emplace_back(service_.slots);
  acked_.assign(service_.num_servers(), 0);
}

PsWorker::~PsWorker() {
  stop_.store(true);
  cq_->interrupt();
  if (thread_.joinable()) thread_.join();
  fabric_.cancel(*cq_);
  fabric_.set_imm_cq(nullptr);
}

void PsWorker::start(std::vector<rdma::RemoteKey> rings) {
  rings_ = std::move(rings);
  for (int s = 0; s < service_.num_servers(); ++s) post_receive(s);
  next_check_ = std::chrono::steady_clock::now() + kHealthCheck;
  thread_ = std::thread([this] { run(); });
}

void PsWorker::post_receive(int server) {
  fabric_.recv(service_.servers[server], inbox_[server].data(), inbox_[server].size(),
               wire::kToWorker, *cq_, ctx(Ctx::kControl, static_cast<uint64_t>(server)));
}

void PsWorker::add_partitions(size_t total) {
  std::lock_guard lock(mu_);
  if (parts_.size() < total) parts_.resize(total);
}

PsWorkPtr PsWorker::submit(OpKind kind, const std::vector<const KeyInfo*>& keys,
                           const std::vector<const void*>& data, const std::vector<void*>& out) {
  const bool push = kind != OpKind::kPull, pull = kind != OpKind::kPush;
  size_t bytes = 0;
  for (const KeyInfo* k : keys) bytes += k->bytes();
  auto op = std::make_shared<Op>();
  op->what = std::string(op_name(kind)) + " of " +
             (keys.size() == 1 ? "key " + std::to_string(keys[0]->key)
                               : std::to_string(keys.size()) + " keys");
  op->work = std::make_shared<PsWorkImpl>(op_name(kind), bytes,
                                          service_.timeout + std::chrono::seconds(5), rank_);
  op->bytes = bytes;
  op->deadline = std::chrono::steady_clock::now() + service_.timeout;
  // The pull buffers are registered before the lock: registration is the transport's work.
  std::vector<rdma::RemoteKey> dest(keys.size());
  if (pull) {
    for (size_t i = 0; i < keys.size(); ++i) {
      op->regions.push_back(fabric_.register_memory(out[i], keys[i]->bytes(), rdma::kAccessRemoteWrite));
      dest[i] = op->regions.back()->remote_key();
    }
  }
  PsWorkPtr work = op->work;
  std::lock_guard lock(mu_);
  if (aborted_) {
    op->work->finish(aborted_, 0, 0);
    return work;
  }
  for (const KeyInfo* k : keys)
    op->tasks_left += static_cast<int>(k->partitions.size()) * ((push ? 1 : 0) + (pull ? 1 : 0));
  ops_.push_back(op);
  for (size_t i = 0; i < keys.size(); ++i) {
    const KeyInfo& key = *keys[i];
    const size_t elem = dtype_size(key.dtype);
    for (uint32_t id : key.partitions) {
      const Partition& part = keys_.partitions()[id];
      PartitionState& ps = parts_[id];
      if (push) {
        auto t = std::make_unique<Task>();
        t->op = op;
        t->partition = id;
        t->server = part.server;
        t->src = static_cast<const std::byte*>(data[i]) + part.first * elem;
        t->bytes = part.bytes(key.dtype);
        ps.clock += 1;
        ps.pushes.push_back(std::move(t));
        stats_.pushes += 1;
        stats_.bytes_pushed += part.bytes(key.dtype);
      }
      if (pull) {
        auto t = std::make_unique<Task>();
        t->op = op;
        t->partition = id;
        t->server = part.server;
        t->bytes = part.bytes(key.dtype);
        const uint64_t request = next_id_++;
        t->request = wire::PullRequest{.partition = id,
                                       .clock = ps.clock,
                                       .dest = dest[i],
                                       .dest_offset = part.first * elem,
                                       .request = request};
        t->clock_at_submit = ps.clock;
        pull_by_dest_[{dest[i].key, part.first * elem}] = request;
        Task& task = *t;
        pulls_.emplace(request, std::move(t));
        stats_.pulls += 1;
        stats_.bytes_pulled += task.bytes;
        try {
          fabric_.send(service_.servers[part.server], &task.request, sizeof task.request,
                       wire::kToServer, static_cast<uint64_t>(wire::Kind::kPullRequest), *cq_,
                       ctx(Ctx::kRequest, request));
        } catch (const Error& e) {
          abort(server_error(part.server, e, *op), op.get());
          return work;
        }
      }
    }
  }
  if (push) {
    for (const KeyInfo* k : keys)
      for (uint32_t id : k->partitions) pump_partition(id);
    pump();
  }
  return work;
}

void PsWorker::pump_partition(uint32_t partition) {
  PartitionState& ps = parts_[partition];
  if (ps.push_in_flight || ps.pushes.empty()) return;
  std::unique_ptr<Task> next = std::move(ps.pushes.front());
  ps.pushes.pop_front();
  const int server = next->server;
  if (!ready_[server].empty() || slots_[server].empty()) stats_.credit_waits += 1;
  ps.push_in_flight = true;  // its turn has come; now it waits for a slot and the window
  ready_[server].push_back(std::move(next));
}

void PsWorker::pump() {
  const int n = service_.num_servers();
  for (int idle = 0; idle < n && !aborted_;) {
    const int s = next_server_;
    next_server_ = (next_server_ + 1) % n;
    auto& queue = ready_[s];
    if (queue.empty() || slots_[s].empty() || !window_has_room(queue.front()->bytes)) {
      ++idle;
      continue;
    }
    std::unique_ptr<Task> task = std::move(queue.front());
    queue.pop_front();
    issue_push(std::move(task));
    idle = 0;
  }
}

void PsWorker::issue_push(std::unique_ptr<Task> task) {
  const uint32_t slot = slots_[task->server].take();
  const uint64_t id = next_id_++;
  Task& t = *task;
  on_wire_ += t.bytes;
  stats_.peak_bytes_on_wire = std::max<uint64_t>(stats_.peak_bytes_on_wire, on_wire_);
  pushes_.emplace(id, std::move(task));
  try {
    fabric_.write(service_.servers[t.server], t.src, t.bytes, rings_[t.server],
                  static_cast<uint64_t>(slot) * service_.slot_bytes,
                  wire::push_imm(t.partition, wire::PushKind::kGradient), *cq_, ctx(Ctx::kPush, id));
  } catch (const Error& e) {
    abort(server_error(t.server, e, *t.op), t.op.get());
  }
}

void PsWorker::finalize() {
  // Every pending operation ends by its deadline at the latest (the completion thread fails
  // it then), so this wait is bounded.
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (ops_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Done, then wait for every server's DoneAck: only then may this rank close its
  // connections (a server that saw the goodbye first would take this worker for gone).
  std::vector<int> told;
  {
    std::lock_guard lock(mu_);
    for (int s = 0; s < service_.num_servers(); ++s) {
      if (aborted_ || fabric_.peer_failed(service_.servers[s])) continue;
      fabric_.send(service_.servers[s], nullptr, 0, wire::kToServer,
                   static_cast<uint64_t>(wire::Kind::kDone), *cq_, ctx(Ctx::kDone, static_cast<uint64_t>(s)));
      told.push_back(s);
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + service_.timeout;
  for (;;) {
    {
      std::lock_guard lock(mu_);
      bool all = true;
      for (int s : told) all = all && (acked_[s] || fabric_.peer_failed(service_.servers[s]));
      if (all || aborted_) break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      log(LogLevel::kWarn, "ps worker rank ", rank_, ": a server did not acknowledge finalize within ",
          service_.timeout.count(), " ms");
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  stop_.store(true);
  cq_->interrupt();
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mu_);
  if (aborted_) throw *aborted_;
}

Error PsWorker::server_error(int server, const Error& cause, const Op& op) const {
  const int rank = service_.servers[server];
  const ErrorContext where{.rank = rank_, .peer = rank, .op = op.what};
  if (cause.category() == ErrorCategory::kRemote || fabric_.peer_failed(rank))
    return remote_error("parameter server rank " + std::to_string(rank) + " failed: " + cause.message(),
                        where);
  return Error(cause.category(), cause.message(), where);
}

Stats PsWorker::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace plait::ps
