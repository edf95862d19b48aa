#include "transport/tcp/tcp_fabric.h"

#include <algorithm>
#include <optional>

#include "core/log.h"
#include "transport/tcp/tcp_provider.h"
#include "transport/tcp/tcp_settings.h"

namespace plait::transport {

Capabilities tcp_capabilities(const Config& config) {
  Capabilities c;
  c.provider = "tcp";
  c.streams_per_peer = config.get<TcpSettings>().streams;
  return c;
}

std::unique_ptr<Fabric> create_tcp_fabric(const FabricOptions& options) {
  tcp::Mesh mesh = tcp::connect_mesh(options);
  return std::make_unique<tcp::TcpFabric>(options, std::move(mesh));
}

namespace tcp {

CostModel tcp_cost_model(const Config& config) {
  CostModel m;
  // Loopback on a commodity host: a small message costs ~15 us one way when a thread has to
  // be woken on each side (a waiter that sleeps), ~5 us when the waiter polls the sockets
  // inline; the model keeps the former (not re-tuned for algorithm selection yet). A socket
  // moves ~3 GB/s, and the receiver copies out of a cold buffer at ~4 GB/s (a read and a
  // write per byte).
  m.alpha_us = 15.0;
  m.beta_bytes_per_us = 3000.0;
  m.copy_bytes_per_us = 4000.0;
  // Eager sends n bytes blind, and when the receive is not posted yet the receiver buffers
  // them and copies them once more (n / copy). Rendezvous waits a round trip (RTS, CTS)
  // before the first byte moves, with the link idle meanwhile. The round trip is paid on
  // every message, the copy only on one that arrives before its receive, which a collective
  // mostly avoids (a step posts its receive before its peer's data can arrive). Measured
  // on loopback with inline progress, min of 4 runs: sendrecv 128 KiB np=2 94 us rendezvous
  // vs 62 eager; allreduce np=2 at 128 KiB / 512 KiB / 1 MiB 99 / 185 / 292 us with a
  // 64 KiB threshold vs 61 / 145 / 242 with 1 MiB. Above a collective's chunk (1 MiB), so
  // a schedule's chunks never wait for a round trip each: on a link whose queues hold tens
  // of milliseconds (1 Gbit/s with TBF, bench/ps_testbed.sh) a round trip per 1 MiB chunk
  // held a 64 MiB ring allreduce np=2 to 67 MB/s of 125, eagerly 119; on loopback 2 MiB was
  // level with 1 MiB (9 alternating runs: 260 / 1725 / 8826 us at 1 / 4 / 16 MiB against
  // 277 / 1743 / 9793). 2 MiB also bounds what one unexpected message pins on the receiver
  // (PLAIT_MAX_UNEXPECTED bounds the sum per peer).
  constexpr size_t kEagerThreshold = size_t{2} << 20;
  m.eager_threshold = config.eager_threshold != 0 ? config.eager_threshold : kEagerThreshold;
  return m;
}

TcpFabric::TcpFabric(const FabricOptions& options, Mesh mesh)
    : OpLifecycle(options.rank, options.size, "tcp", options.name),
      config_(options.config),
      capabilities_(tcp_capabilities(options.config)),
      cost_model_(tcp_cost_model(options.config)),
      eager_threshold_(cost_model_.eager_threshold),
      stripe_bytes_(std::max<size_t>(options.config.get<TcpSettings>().stripe_bytes, 4096)),
      streams_(options.config.get<TcpSettings>().streams),
      keepalive_(options.config.keepalive),
      peer_timeout_(effective_peer_timeout(options.config)),
      registry_(options.registry ? options.registry : std::make_shared<MemoryRegistry>()) {
  matcher_.set_limits({.bytes = options.config.max_unexpected_bytes,
                       .messages = options.config.max_unexpected_messages});
  peers_.resize(size_);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || !mesh.member(p)) continue;
    peers_[p] = std::make_unique<Peer>();
    for (int s = 0; s < streams_; ++s) {
      net::set_nonblocking(mesh.sockets[p][s].get());
      // What the kernel holds unsent is out of our hands: a reply queued behind megabytes of
      // it waits for them to drain (at 200 Mbit/s, 1.6 MB is 64 ms). With little left unsent
      // there, replies overtake data in our own queue instead (Stream::submit).
      if (options.config.get<TcpSettings>().notsent_lowat > 0)
        net::set_notsent_lowat(mesh.sockets[p][s].get(), options.config.get<TcpSettings>().notsent_lowat);
      // The lower rank of a pair connected its sockets (connect.cc).
      std::optional<StreamKeys> keys;
      if (options.config.get<TcpSettings>().integrity)
        keys = derive_stream_keys(options.job_token, mesh.nonces[p][s], /*connector=*/rank_ < p);
      peers_[p]->streams.push_back(std::make_unique<Stream>(
          std::move(mesh.sockets[p][s]), p, s, &user_memory_guard_, keys ? &*keys : nullptr));
    }
  }
  start_progress();
}

TcpFabric::~TcpFabric() {
  stop_reporting();
  stop_requested_.store(true);
  wake_progress();
  if (progress_.joinable()) progress_.join();
}

std::unique_ptr<CompletionQueue> TcpFabric::create_cq() {
  return std::make_unique<PolicyCompletionQueue>(config_.wait_policy, config_.spin_time, this);
}

std::unique_ptr<MemoryRegion> TcpFabric::register_memory(void* addr, size_t length,
                                                         uint32_t access) {
  try {
    return std::make_unique<RegistryMemoryRegion>(registry_, registry_->add(addr, length, access));
  } catch (const Error& e) {
    throw e.with_context({.rank = rank_});
  }
}

void TcpFabric::set_imm_cq(CompletionQueue* cq) {
  set_imm_queue(cq);
}

bool TcpFabric::peer_failed(int peer) const {
  const PeerHealth* health = health_of(peer);
  return health && health->failed.load();
}

std::string TcpFabric::peer_failure(int peer) const {
  const PeerHealth* health = health_of(peer);
  return health && health->failed.load() ? health->reason() : std::string();
}

void TcpFabric::cancel(CompletionQueue* cq) {
  std::vector<OpRef> ops = ops_of(cq);
  std::vector<std::pair<int, uint64_t>> declined_acks;  // (sender, its op)
  {
    // With every stream's sending side held, no frame of these ops is being written while
    // they are marked finished; the one partly written frame per stream keeps a copy.
    std::vector<std::unique_lock<FutexMutex>> held;
    for (auto& peer : peers_)
      if (peer)
        for (auto& s : peer->streams) held.push_back(s->lock_sending());
    for (const OpRef& op : ops) fail(*op, aborted_error("cancelled", context_of(*op)));
    // A rendezvous sender waits for our kDataAck: it will not come now.
    for (const OpRef& op : ops)
      if (op->type == OpType::kRecv && op->remote_op != 0)
        declined_acks.push_back({op->peer.load(), op->remote_op});
    for (auto& peer : peers_)
      if (peer)
        for (auto& s : peer->streams) s->keep_started_frame_locked();
  }
  for (const auto& [sender, sender_op] : declined_acks) {
    Frame ack;
    ack.header.type = MessageType::kDataAck;
    ack.header.flags = kFlagDeclined;
    ack.header.id = sender_op;
    submit(sender, 0, std::move(ack));
  }
  await_reports();
  matcher_.purge_finished();
  // Waits out the socket reader's access to user memory in flight, if any; every later
  // one sees the ops finished.
  await_user_memory_access();
}

// --- peers and frames ---

PeerHealth* TcpFabric::health_of(int rank) const {
  return rank < 0 || rank >= size_ ? nullptr : peers_[rank].get();
}

void TcpFabric::submit(int peer, int index, Frame frame) {
  // From the claim inside the stream to the report (see succeed()).
  std::shared_lock guard(report_guard_);
  FinishedOps finished;
  if (stream(peer, index).submit(std::move(frame), &finished) != 0) {
    // This write broke the socket; the next socket reader fails the peer.
    broken_stream_.store(true);
    wake_progress();
  }
  report_sent(finished);
}

void TcpFabric::report_sent(const FinishedOps& finished) {
  finished.for_each([this](Op& op) { report(op, nullptr); });
}

void TcpFabric::protocol_error(const Stream& s, const std::string& what) const {
  throw remote_error("protocol error from rank " + std::to_string(s.peer()) + " on stream " +
                     std::to_string(s.index()) + ": " + what);
}

// --- dispatch of incoming messages ---

Incoming TcpFabric::on_header(Stream& s, const WireHeader& h) {
  switch (h.type) {
    case MessageType::kEager: return on_eager(s, h);
    case MessageType::kData: return on_data(s, h);
    case MessageType::kWrite: return on_write(s, h);
    case MessageType::kWriteAck:
    case MessageType::kReadResp:
    case MessageType::kAtomicResp: return on_reply(s, h);
    case MessageType::kRts:
    case MessageType::kCts:
    case MessageType::kReadReq:
    case MessageType::kAtomic:
    case MessageType::kKeepAlive:
    case MessageType::kDataAck:
    case MessageType::kStreamLost:
      if (h.length != 0) protocol_error(s, "payload on a control message");
      return {};
    case MessageType::kGoodbye: {
      if (h.length > kMaxReasonBytes) protocol_error(s, "oversized goodbye");
      Incoming in;
      in.sink = Sink::buffer(h.length);
      return in;
    }
  }
  protocol_error(s, "unknown message type " + std::to_string(static_cast<int>(h.type)));
}

void TcpFabric::on_payload(Stream& s, const WireHeader& h, Incoming& in) {
  switch (h.type) {
    case MessageType::kEager: on_eager_payload(s, h, in); break;
    case MessageType::kRts: on_rts(s, h); break;
    case MessageType::kCts: on_cts(s, h); break;
    case MessageType::kData: on_data_payload(in, h); break;
    case MessageType::kWrite: on_write_payload(s, h, in); break;
    case MessageType::kReadReq: on_read_request(s, h); break;
    case MessageType::kAtomic: on_atomic(s, h); break;
    case MessageType::kWriteAck:
    case MessageType::kReadResp:
    case MessageType::kAtomicResp: on_reply_payload(h, in); break;
    case MessageType::kGoodbye: {
      s.mark_goodbye();
      const auto& text = in.sink.bytes();
      if (!text.empty()) peers_[s.peer()]->first_loss.assign(text.begin(), text.end());
      break;
    }
    case MessageType::kKeepAlive: break;  // its bytes are the news (Stream::received_bytes)
    case MessageType::kDataAck: on_data_ack(s, h); break;
    case MessageType::kStreamLost: on_stream_lost(s, h); break;
  }
}

}  // namespace tcp
}  // namespace plait::transport
