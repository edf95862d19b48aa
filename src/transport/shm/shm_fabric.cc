#include "transport/shm/shm_fabric.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/log.h"
#include "transport/shm/doorbell.h"
#include "transport/shm/shm_provider.h"
#include "transport/shm/shm_settings.h"

namespace plait::transport {

Capabilities shm_capabilities(const Config&) {
  Capabilities c;
  c.provider = "shm";
  c.streams_per_peer = 1;
  return c;
}

namespace shm {
namespace {

constexpr uint64_t kRingBudget = 16ull << 20;  // all of a rank's inboxes together
constexpr uint64_t kMinRing = 64ull << 10;
constexpr uint64_t kMaxRing = 1ull << 20;
constexpr uint64_t kMaxRingForEager = 64ull << 20;
constexpr uint64_t kTableBudget = 1ull << 20;

// Ring sizes: 16 MiB over the peers (at least 64 KiB, at most 1 MiB each: beyond that the
// copy fallback gains little), and always room for four eager messages of the threshold.
Geometry plan_geometry(size_t peers, size_t eager_threshold) {
  uint64_t ring = std::bit_floor(kRingBudget / std::max<size_t>(peers, 1));
  ring = std::clamp(ring, kMinRing, kMaxRing);
  ring = std::max(ring, std::min(kMaxRingForEager, std::bit_ceil(4 * record_bytes(eager_threshold))));
  const uint64_t stride = align_up(kSlotPinsOffset + 4ull * peers, 64);
  const uint64_t slots = std::clamp<uint64_t>(std::bit_floor(kTableBudget / stride), 64, 1024);
  return make_geometry(static_cast<uint32_t>(peers), ring, slots);
}

std::vector<int> served_ranks(const FabricOptions& o, const ErrorContext& ctx) {
  std::vector<int> peers = o.peers;
  if (peers.empty()) {
    for (int r = 0; r < o.size; ++r)
      if (r != o.rank) peers.push_back(r);
    return peers;
  }
  std::sort(peers.begin(), peers.end());
  for (size_t i = 0; i < peers.size(); ++i) {
    if (peers[i] < 0 || peers[i] >= o.size || peers[i] == o.rank ||
        (i > 0 && peers[i] == peers[i - 1]))
      throw invalid_usage("FabricOptions.peers: rank " + std::to_string(peers[i]) +
                              " is not another rank of this fabric (size " +
                              std::to_string(o.size) + "), or is listed twice", ctx);
  }
  return peers;
}

}  // namespace

CostModel shm_cost_model(const Config& config) {
  CostModel m;
  // A record through a ring costs well under a microsecond when the receiver polls, a few
  // when its progress thread must be woken; a rendezvous adds a round trip (RTS, then FIN)
  // and a process_vm_readv call: ~2 us together. Cross-memory attach moves ~5 GB/s (one
  // copy, page pinning included); a memcpy out of a ring that is warm in cache ~8 GB/s.
  m.alpha_us = 2.0;
  m.beta_bytes_per_us = 5000.0;
  m.copy_bytes_per_us = 8000.0;
  // Eager pays one extra copy (into the ring and out again, against one CMA copy): n / copy.
  // Rendezvous pays the round trip: 2 alpha. Eager wins below n = 2 * alpha * copy = 32 KB;
  // rounded down to a power of two (16 KiB), which also keeps four eager messages in a
  // small ring.
  double break_even = 2.0 * m.alpha_us * m.copy_bytes_per_us;
  size_t threshold = size_t{1} << static_cast<int>(std::floor(std::log2(break_even)));
  m.eager_threshold = config.eager_threshold != 0 ? config.eager_threshold : threshold;
  return m;
}

ShmFabric::ShmFabric(const FabricOptions& options, std::vector<int> peer_ranks,
                     Attachment attachment, const CostModel& cost_model)
    : OpLifecycle(options.rank, options.size, "shm", options.name),
      config_(options.config),
      capabilities_(shm_capabilities(options.config)),
      cost_model_(cost_model),
      eager_threshold_(cost_model.eager_threshold),
      registry_(options.registry ? options.registry : std::make_shared<MemoryRegistry>()),
      own_view_(attachment.own_view()),
      own_(std::move(attachment.own)),
      cma_permission_(std::move(attachment.cma_permission)) {
  matcher_.set_limits({.bytes = options.config.max_unexpected_bytes,
                       .messages = options.config.max_unexpected_messages});
  index_of_.assign(size_, -1);
  for (size_t i = 0; i < peer_ranks.size(); ++i) {
    auto p = std::make_unique<Peer>();
    p->rank = peer_ranks[i];
    p->index = static_cast<uint32_t>(i);
    p->link = std::move(attachment.peers[i]);
    p->view = p->link.view();
    const uint32_t me = p->link.my_index;
    p->outbox.init(RingWriter(p->view.ring_control(me), p->view.ring_data(me),
                              p->view.geometry().ring_capacity),
                   &p->view.header(), [this](const OpRef& op) { succeed(*op); });
    p->inbox = RingReader(own_view_.ring_control(p->index), own_view_.ring_data(p->index),
                          own_view_.geometry().ring_capacity);
    p->regions = RemoteRegions(p->view, me);
    index_of_[p->rank] = static_cast<int>(i);
    peers_.push_back(std::move(p));
  }
  // Only a process that is gone no longer counts: a peer we consider failed may still be
  // alive and in the middle of a copy into our memory.
  publisher_ = std::make_unique<RegionPublisher>(
      own_view_, rank_, peer_ranks, [this](uint32_t i) { return peer_exited(peers_[i]->link); },
      std::min<std::chrono::milliseconds>(config_.timeout, std::chrono::seconds(30)));
  registry_->add_listener(publisher_.get());
  progress_ = std::thread([this] { progress_loop(); });
}

ShmFabric::~ShmFabric() {
  stop_requested_.store(true);
  wake_self(/*force=*/true);
  if (progress_.joinable()) progress_.join();
  stop_reporting();
  // Our regions stop being reachable by CMA before the memory may go away; pins in flight
  // are waited out.
  publisher_->retire_all();
  registry_->remove_listener(publisher_.get());
  // After every record we wrote: peers drain what we sent, then see us gone, and why we
  // lost a peer if we did.
  const std::string farewell = first_loss();
  char* text = own_header().first_loss;
  const size_t n = std::min(farewell.size(), sizeof own_header().first_loss - 1);
  std::memcpy(text, farewell.data(), n);
  text[n] = '\0';
  own_header().closed.store(1, std::memory_order_release);
  for (auto& p : peers_) ring_doorbell(p->view.header(), /*force=*/true);
}

std::unique_ptr<CompletionQueue> ShmFabric::create_cq() {
  return std::make_unique<PolicyCompletionQueue>(config_.wait_policy, config_.spin_time, this);
}

std::unique_ptr<MemoryRegion> ShmFabric::register_memory(void* addr, size_t length,
                                                         uint32_t access) {
  try {
    return std::make_unique<RegistryMemoryRegion>(registry_, registry_->add(addr, length, access));
  } catch (const Error& e) {
    throw e.with_context({.rank = rank_});
  }
}

void ShmFabric::set_imm_cq(CompletionQueue* cq) {
  set_imm_queue(cq);
}

bool ShmFabric::peer_failed(int peer) const {
  const PeerHealth* health = health_of(peer);
  return health && health->failed.load();
}

std::string ShmFabric::peer_failure(int peer) const {
  const PeerHealth* health = health_of(peer);
  return health && health->failed.load() ? health->reason() : std::string();
}

void ShmFabric::cancel(CompletionQueue* cq) {
  std::vector<OpRef> ops = ops_of(cq);
  std::vector<OpRef> posted = matcher_.posted_if([&](const Op& op) { return op.cq == cq; });
  ops.insert(ops.end(), posted.begin(), posted.end());
  for (const OpRef& op : ops) fail(*op, aborted_error("cancelled", context_of(*op)));
  matcher_.purge_finished();
  await_reports();
  // Waits out the provider's write into user memory in flight, if any (one record's copy or
  // one CMA chunk); every later one sees the ops finished.
  await_user_memory_access();
  // Likewise for reads of user memory: an outbox that checked a send before we finished it
  // may be copying from its buffer into the ring (one record); every later copy sees it
  // finished. (Reads by CMA are the peer's, of our memory: see the notes in two_sided.cc.)
  for (auto& p : peers_) p->outbox.fence();
}

// --- inline progress ---

void ShmFabric::begin_polling() {
  own_header().pollers.fetch_add(1, std::memory_order_seq_cst);
}

void ShmFabric::end_polling() {
  SegmentHeader& h = own_header();
  h.pollers.fetch_sub(1, std::memory_order_seq_cst);
  // A producer that saw us polling did not ring; what it wrote after our last pass would sit
  // there until the progress thread's next timeout. Hand it over now. (seq_cst pairs with the
  // producer's fence between publishing and reading `pollers`.)
  if (h.sleeping.load(std::memory_order_seq_cst) != 0 && has_work()) wake_self(/*force=*/true);
}


// --- peers ---

PeerHealth* ShmFabric::health_of(int rank) const {
  if (rank < 0 || rank >= size_ || index_of_[rank] < 0) return nullptr;
  return peer_of(rank);
}

ShmFabric::Peer* ShmFabric::checked_peer(int peer, const char* what) const {
  check_peer(peer, what);
  return peer_of(peer);
}

void ShmFabric::send_record(Peer& p, const Record& r, std::string payload) {
  if (p.failed.load(std::memory_order_relaxed)) return;  // nobody reads it any more
  if (p.outbox.try_write(r, payload.data(), payload.size())) {
    p.outbox.notify();
    return;
  }
  Pending item;
  item.kind = Pending::Kind::kCopy;
  item.header = r;
  item.bytes = std::move(payload);
  p.outbox.post(std::move(item));
}

Error ShmFabric::denial(const Peer& p, const std::string& reason, const ErrorContext& ctx) const {
  return invalid_usage("remote access denied by rank " + std::to_string(p.rank) + ": " + reason,
                       ctx);
}

}  // namespace shm

std::unique_ptr<Fabric> create_shm_fabric(const FabricOptions& options) {
  const ErrorContext ctx{.rank = options.rank, .op = "shm fabric '" + options.name + "' setup"};
  if (!options.store) throw invalid_usage("shm fabric needs a store", ctx);
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size)
    throw invalid_usage("invalid rank " + std::to_string(options.rank) + " of size " +
                            std::to_string(options.size), ctx);
  const std::string& cma = options.config.get<ShmSettings>().cma;
  if (cma != "auto" && cma != "on" && cma != "off")
    throw invalid_usage("PLAIT_SHM_CMA must be auto, on or off, got '" + cma + "'", ctx);
  std::vector<int> peers = shm::served_ranks(options, ctx);
  CostModel model = shm::shm_cost_model(options.config);
  shm::Attachment attachment =
      shm::attach(options, peers, shm::plan_geometry(peers.size(), model.eager_threshold));
  return std::make_unique<shm::ShmFabric>(options, std::move(peers), std::move(attachment), model);
}

}  // namespace plait::transport
