#include "coll/segment/collective_segment.h"

#include <unistd.h>

#include <climits>
#include <cstring>
#include <sstream>

#include "core/futex.h"
#include "core/log.h"
#include "core/random.h"
#include "plait/error.h"

namespace plait::coll::segment {
namespace {

uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

std::chrono::milliseconds left(const Deadline& deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.at() - Clock::now());
  return std::max(ms, std::chrono::milliseconds(1));
}

}  // namespace

Geometry plan_geometry(uint32_t ranks, uint64_t slot_bytes) {
  Geometry g;
  g.ranks = ranks;
  g.slot_bytes = align_up(std::max<uint64_t>(slot_bytes, 4096), 4096);
  g.control_offset = align_up(sizeof(Header), 4096);
  g.input_offset = align_up(g.control_offset + sizeof(RankControl) * ranks, 4096);
  g.output_offset = g.input_offset + g.slot_bytes * 2 * ranks;
  g.total_bytes = g.output_offset + g.slot_bytes * 2;
  return g;
}

std::unique_ptr<CollectiveSegment> CollectiveSegment::attach(int rank, int size, Store& store,
                                                             const std::string& key,
                                                             uint64_t slot_bytes,
                                                             const Deadline& deadline) {
  const ErrorContext ctx{.rank = rank, .op = "collective segment setup"};
  const Geometry g = plan_geometry(static_cast<uint32_t>(size), slot_bytes);
  SharedMemory segment;
  if (rank == 0) {
    uint8_t tag[kTagSize];
    const uint64_t a = random_u64(), b = random_u64();
    std::memcpy(tag, &a, 8);
    std::memcpy(tag + 8, &b, 8);
    const std::string name = "/plait-coll-" + hex(tag, 6) + "-" + std::to_string(::getpid());
    sweep_stale_shared_memory({kMagic});
    try {
      segment = SharedMemory::create(name, g.total_bytes);
    } catch (const Error& e) {
      log(LogLevel::kWarn, "rank 0: no collective segment (", e.what(),
          "); this communicator's collectives use messages only");
      store.set(key, std::string("none"));
      return nullptr;
    }
    auto* h = reinterpret_cast<Header*>(segment.base());
    __atomic_store_n(&h->pid, static_cast<int32_t>(::getpid()), __ATOMIC_RELEASE);
    h->version = kVersion;
    h->ranks = g.ranks;
    h->slot_bytes = g.slot_bytes;
    h->total_bytes = g.total_bytes;
    std::memcpy(h->tag, tag, kTagSize);
    for (int r = 0; r < size; ++r) new (&reinterpret_cast<RankControl*>(segment.base() + g.control_offset)[r]) RankControl();
    h->magic.store(kMagic, std::memory_order_release);
    std::ostringstream value;
    value << name << ' ' << hex(tag, kTagSize) << ' ' << g.slot_bytes;
    store.set(key, value.str());
  } else {
    const std::string published = store.get_string(key, left(deadline));
    if (published == "none") return nullptr;  // rank 0 said why
    std::istringstream value(published);
    std::string name, tag_hex;
    uint64_t their_slot = 0;
    value >> name >> tag_hex >> their_slot;
    if (name.rfind("/plait-coll-", 0) != 0 || tag_hex.size() != 2 * kTagSize)
      throw remote_error("rank 0 published a malformed collective segment entry", ctx);
    segment = SharedMemory::open(name, sizeof(Header));
    if (!segment.base())
      throw remote_error("rank 0's collective segment " + name +
                             " is gone: its setup failed or it exited (see its error)",
                         ctx);
    // Read once, checked here, never again: rank 0 (or anyone mapping it) could change it.
    const auto* h = reinterpret_cast<const Header*>(segment.base());
    const Geometry theirs = plan_geometry(static_cast<uint32_t>(size), their_slot);
    uint8_t their_tag[kTagSize];
    std::memcpy(their_tag, h->tag, kTagSize);
    if (h->magic.load(std::memory_order_acquire) != kMagic ||
        __atomic_load_n(&h->version, __ATOMIC_RELAXED) != kVersion ||
        __atomic_load_n(&h->ranks, __ATOMIC_RELAXED) != g.ranks ||
        __atomic_load_n(&h->slot_bytes, __ATOMIC_RELAXED) != theirs.slot_bytes ||
        theirs.total_bytes > segment.bytes() || hex(their_tag, kTagSize) != tag_hex)
      throw remote_error("collective segment " + name + " is not the one rank 0 published " +
                             "(another job's, or a different version)",
                         ctx);
    return finish_attach(rank, size, store, key, std::move(segment), theirs, deadline);
  }
  return finish_attach(rank, size, store, key, std::move(segment), g, deadline);
}

std::unique_ptr<CollectiveSegment> CollectiveSegment::finish_attach(
    int rank, int size, Store& store, const std::string& key, SharedMemory segment, const Geometry& g,
    const Deadline& deadline) {
  // Everyone has mapped it once every rank says so; then the name can go.
  store.set(key + "/mapped/" + std::to_string(rank), "1");
  if (rank == 0) {
    std::vector<std::string> keys;
    for (int r = 1; r < size; ++r) keys.push_back(key + "/mapped/" + std::to_string(r));
    try {
      store.wait(keys, left(deadline));
    } catch (...) {
      segment.unlink();
      throw;
    }
    segment.unlink();
  }
  return std::unique_ptr<CollectiveSegment>(new CollectiveSegment(rank, std::move(segment), g));
}

void CollectiveSegment::ring_if_waiting(int r, int64_t after, uint64_t round,
                                        Waiters waiters) const {
  if (after != kRingNow && Clock::now().time_since_epoch().count() < after) return;
  RankControl& c = control(r);
  const uint64_t active = c.active_round.load(std::memory_order_seq_cst);
  // kNoRound is the largest value: a rank with no round in progress waits for nothing.
  if (waiters == Waiters::kSameRound ? active > round : active == kNoRound || active < round + 2)
    return;
  c.bell.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_shared(&c.bell, INT_MAX);
}

}  // namespace plait::coll::segment
