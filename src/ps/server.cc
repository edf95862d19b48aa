// The server's setup, its completion thread, and its control messages. The arithmetic of a
// push and the answering of pulls are in server_shard.cc.
#include <algorithm>
#include <cstring>

#include "core/log.h"
#include "ps/control.h"
#include "ps/server.h"
#include "ps/update_kernels.h"

namespace plait::ps {
PsServer::PsServer(rdma::Fabric& fabric, const Service& service, int index)
    : fabric_(fabric),
      service_(service),
      index_(index),
      rank_(service.servers[index]),
      cq_(fabric.create_cq()),
      freed_(service.num_workers()),
      parked_(service.num_workers(), 0),
      done_(service.num_workers(), 0),
      failed_(service.num_workers()) {
  fabric_.set_imm_cq(cq_.get());
  for (int w = 0; w < service_.num_workers(); ++w) {
    rings_.emplace_back(static_cast<size_t>(service_.slots) * service_.slot_bytes);
    ring_regions_.push_back(
        fabric_.register_memory(rings_[w].data(), rings_[w].size(), rdma::kAccessRemoteWrite));
    ring_owner_[ring_regions_[w]->remote_key().key] = w;
  }
  // Enough receives for every worker's pull requests of a few partitions at once; more are
  // buffered by the transport until one is reposted.
  inbox_.resize(static_cast<size_t>(4 * service_.num_workers() + 4));
  for (size_t i = 0; i < inbox_.size(); ++i) post_receive(i);
}

PsServer::~PsServer() {
  stop_.store(true);
  cq_->interrupt();
  if (thread_.joinable()) thread_.join();
  // Nothing of ours is written after this (posted receives, replies in flight).
  fabric_.cancel(*cq_);
  fabric_.set_imm_cq(nullptr);
}

std::vector<rdma::RemoteKey> PsServer::ring_keys() const {
  std::vector<rdma::RemoteKey> keys;
  for (const auto& r : ring_regions_) keys.push_back(r->remote_key());
  return keys;
}

void PsServer::start() {
  next_check_ = std::chrono::steady_clock::now() + kHealthCheck;
  thread_ = std::thread([this] { run(); });
}

void PsServer::post_receive(size_t slot) {
  fabric_.recv(-1, inbox_[slot].data(), inbox_[slot].size(), wire::kToServer, *cq_,
               ctx(Ctx::kInbox, slot));
}

void PsServer::run() {
  // Completions are handled in batches under the lock; credits go back after each batch, so
  // a worker waiting for a slot waits for one batch at most.
  constexpr int kBatch = 64;
  rdma::Completion c;
  while (!stop_.load(std::memory_order_relaxed)) {
    const bool got = cq_->wait(&c, kHealthCheck);
    std::lock_guard lock(mu_);
    if (got) {
      handle(c);
      for (int i = 1; i < kBatch && cq_->poll(&c); ++i) handle(c);
    }
    flush_credits(true);
    if (std::chrono::steady_clock::now() >= next_check_) {
      check_health();
      next_check_ = std::chrono::steady_clock::now() + kHealthCheck;
    }
  }
}

void PsServer::handle(const rdma::Completion& c) {
  switch (c.op) {
    case rdma::OpType::kRemoteWriteImm: {
      auto owner = ring_owner_.find(c.key);
      const int worker = owner == ring_owner_.end() ? -1 : owner->second;
      const size_t slot = c.offset / service_.slot_bytes;
      if (worker < 0 || service_.workers[worker] != c.peer || c.offset % service_.slot_bytes != 0 ||
          slot >= service_.slots) {
        log(LogLevel::kError, "ps server rank ", rank_, ": ignored a write from rank ", c.peer,
            " at offset ", c.offset, " of region ", c.key, " (not a ring slot of that worker)");
        return;
      }
      on_push(worker, static_cast<uint32_t>(slot), wire::imm_partition(c.imm), c.bytes);
      return;
    }
    case rdma::OpType::kRecv: {
      const size_t slot = ctx_id(c.context);
      if (!c.ok()) {
        // A receive from any source fails when any peer dies (the transport cannot tell
        // whether the message it waited for was that peer's): post it again while a worker
        // may still send, or the live workers' requests would find no receive.
        if (stop_.load()) return;
        for (int w : service_.workers)
          if (!fabric_.peer_failed(w)) {
            post_receive(slot);
            return;
          }
        log(LogLevel::kDebug, "ps server rank ", rank_, ": no worker left to receive from: ",
            c.error->what());
        return;
      }
      on_message(c, slot);
      if (!stop_.load()) post_receive(slot);
      return;
    }
    case rdma::OpType::kWrite:
      if (ctx_kind(c.context) == Ctx::kReply) on_reply_done(c);
      return;
    case rdma::OpType::kSend:
      outbox_.erase(ctx_id(c.context));
      if (!c.ok()) log(LogLevel::kDebug, "ps server rank ", rank_, ": ", c.error->what());
      return;
    default:
      return;
  }
}

void PsServer::on_message(const rdma::Completion& c, size_t slot) {
  const int worker = c.peer >= 0 && c.peer < static_cast<int>(service_.role_index.size())
                         ? service_.role_index[c.peer]
                         : -1;
  if (worker < 0 || service_.workers[worker] != c.peer) {
    log(LogLevel::kError, "ps server rank ", rank_, ": a control message from rank ", c.peer,
        ", which is not a worker, was ignored");
    return;
  }
  const wire::ToServer m = wire::decode_to_server(c.header, inbox_[slot].data(), c.bytes);
  switch (m.what) {
    case wire::ToServer::What::kPullRequest:
      on_pull(worker, m.request);
      return;
    case wire::ToServer::What::kDone:
      done_[worker] = 1;
      send_control(worker, wire::Kind::kDoneAck, nullptr, 0);
      // Rounds that still need this worker's pushes can never complete.
      check_health();
      workers_changed_.notify_all();
      return;
    case wire::ToServer::What::kMalformed:
      break;
  }
  log(LogLevel::kError, "ps server rank ", rank_, ": malformed control message (kind ", c.header,
      ", ", c.bytes, " bytes) from rank ", c.peer);
}

void PsServer::send_control(int worker, wire::Kind kind, const void* data, size_t len) {
  const uint64_t id = next_message_++;
  std::vector<std::byte>& buf = outbox_[id];
  buf.resize(len);
  if (len) std::memcpy(buf.data(), data, len);
  try {
    fabric_.send(service_.workers[worker], buf.data(), len, wire::kToWorker,
                 static_cast<uint64_t>(kind), *cq_, ctx(Ctx::kControl, id));
  } catch (const Error& e) {
    outbox_.erase(id);
    log(LogLevel::kWarn, "ps server rank ", rank_, ": message to worker rank ",
        service_.workers[worker], " not sent: ", e.what());
  }
}

// Credits go back a quarter of a ring at a time, and the rest at the end of each batch of
// completions: one message per slot would double the small messages of small keys.
size_t PsServer::credit_batch() const { return std::max<size_t>(1, service_.slots / 4); }

void PsServer::release_slot(int worker, uint32_t slot) {
  freed_[worker].push_back(slot);
  if (freed_[worker].size() >= credit_batch()) flush_credits(false);
}

void PsServer::flush_credits(bool all) {
  const size_t batch = all ? 1 : credit_batch();
  for (int w = 0; w < service_.num_workers(); ++w) {
    std::vector<uint32_t>& slots = freed_[w];
    if (slots.size() < batch || failed_[w].size()) continue;
    std::vector<std::byte> msg(sizeof(wire::Credits) + slots.size() * sizeof(uint32_t));
    wire::Credits head{.count = static_cast<uint32_t>(slots.size())};
    std::memcpy(msg.data(), &head, sizeof head);
    std::memcpy(msg.data() + sizeof head, slots.data(), slots.size() * sizeof(uint32_t));
    send_control(w, wire::Kind::kCredits, msg.data(), msg.size());
    slots.clear();
  }
}

void PsServer::fail_pull(const Pull& p, ErrorCategory category, const std::string& why) {
  std::string reason = why.substr(0, wire::kMaxReasonBytes);
  std::vector<std::byte> msg(sizeof(wire::FailureHeader) + reason.size());
  wire::FailureHeader head{.request = p.request.request,
                           .partition = p.request.partition,
                           .category = static_cast<uint32_t>(category)};
  std::memcpy(msg.data(), &head, sizeof head);
  std::memcpy(msg.data() + sizeof head, reason.data(), reason.size());
  send_control(p.worker, wire::Kind::kFailure, msg.data(), msg.size());
}

void PsServer::add_keys(const KeyTable& table, const std::vector<const KeyInfo*>& keys,
                        const std::vector<rdma::RemoteKey>& init) {
  std::vector<std::unique_ptr<Shard>> created;
  auto read_cq = fabric_.create_cq();
  size_t reads = 0;
  for (size_t k = 0; k < keys.size(); ++k) {
    const KeyInfo& info = *keys[k];
    for (uint32_t id : info.partitions) {
      const Partition& part = table.partitions()[id];
      if (part.server != index_) continue;
      auto s = std::make_unique<Shard>();
      s->id = id;
      s->label = describe_partition(info, part, rank_);
      s->key = info.key;
      s->dtype = info.dtype;
      s->update = info.update;
      s->count = part.count;
      s->bytes = part.bytes(info.dtype);
      const size_t acc_bytes = part.count * dtype_size(acc_type(info.dtype));
      s->master = AlignedBuffer(acc_bytes);
      s->accum = AlignedBuffer(acc_bytes);
      if (acc_type(info.dtype) != info.dtype) s->serve = AlignedBuffer(s->bytes);
      if (info.update.rule == Rule::kMomentum || info.update.rule == Rule::kAdam)
        s->m = AlignedBuffer(acc_bytes);
      if (info.update.rule == Rule::kAdam) s->v = AlignedBuffer(acc_bytes);
      s->pushes.assign(service_.num_workers(), 0);
      s->taken.assign(service_.num_workers(), 0);
      s->in_round.assign(service_.num_workers(), 0);
      if (init[k].key != 0) {
        // The first worker's values, read one-sidedly into what replies are written from.
        std::byte* dest = s->serve.size() ? s->serve.data() : s->master.data();
        fabric_.read(service_.workers[0], dest, s->bytes, init[k], part.first * dtype_size(info.dtype),
                     *read_cq, id);
        ++reads;
      }
      created.push_back(std::move(s));
    }
  }
  for (size_t i = 0; i < reads; ++i) {
    rdma::Completion c;
    if (!read_cq->wait(&c, service_.timeout)) {
      fabric_.cancel(*read_cq);
      throw timeout_error("reading the initial values from worker rank " +
                              std::to_string(service_.workers[0]) + " took longer than " +
                              std::to_string(service_.timeout.count()) + " ms",
                          {.rank = rank_, .peer = service_.workers[0], .op = "ps register_keys"});
    }
    if (!c.ok()) {
      fabric_.cancel(*read_cq);
      throw c.error->with_context({.rank = rank_, .op = "ps register_keys"});
    }
  }
  std::lock_guard lock(mu_);
  shards_.resize(table.partitions().size());
  for (auto& s : created) {
    if (s->serve.size()) load_into(s->dtype, s->master.data(), s->serve.data(), s->count);
    const uint32_t id = s->id;
    shards_[id] = std::move(s);
  }
}

void PsServer::wait_for_workers() {
  std::unique_lock lock(mu_);
  auto settled = [&] {
    for (int w = 0; w < service_.num_workers(); ++w)
      if (!done_[w] && failed_[w].empty()) return false;
    return true;
  };
  // No deadline of its own (a server serves as long as training runs), but never silent:
  // every timeout period it names the workers it still waits for.
  while (!workers_changed_.wait_for(lock, service_.timeout, settled)) {
    std::string waiting;
    for (int w = 0; w < service_.num_workers(); ++w)
      if (!done_[w] && failed_[w].empty()) waiting += " " + std::to_string(service_.workers[w]);
    log(LogLevel::kWarn, "ps server rank ", rank_, ": still serving; waiting for worker ranks",
        waiting, " to finish");
  }
  std::string why;
  for (int w = 0; w < service_.num_workers(); ++w)
    if (!failed_[w].empty()) why += (why.empty() ? "" : "; ") + failed_[w];
  if (!why.empty())
    throw remote_error("workers left without finalize while this server served them: " + why,
                       {.rank = rank_, .op = "ps finalize"});
}

Stats PsServer::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace plait::ps
