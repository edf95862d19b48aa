#include "transport/shm/peer_header.h"

#include <cstring>

#include "plait/error.h"

namespace plait::transport::shm {
namespace {

// The most a peer's geometry may claim before it is checked against the mapping (bounds that
// keep make_geometry's arithmetic far from overflow).
constexpr uint64_t kMaxRingCapacity = uint64_t{1} << 30;
constexpr uint64_t kMaxTableSlots = uint64_t{1} << 20;

}  // namespace

CheckedPeer check_peer_segment(char* base, size_t mapped,
                               const std::array<uint8_t, kTagBytes>& expected_tag, int peer,
                               int size, int our_rank, const std::string& who) {
  const SegmentHeader& h = *reinterpret_cast<const SegmentHeader*>(base);
  if (h.magic.load(std::memory_order_acquire) != kSegmentMagic ||
      __atomic_load_n(&h.version, __ATOMIC_RELAXED) != kLayoutVersion)
    throw invalid_usage(who + " is not a plait shm segment of this version");
  std::array<uint8_t, kTagBytes> their_tag;
  std::memcpy(their_tag.data(), h.tag, kTagBytes);
  if (their_tag != expected_tag)
    throw invalid_usage("job token mismatch: " + who +
                        " was created with another job token (or for another fabric)");
  auto once = [](const auto& field) { return __atomic_load_n(&field, __ATOMIC_RELAXED); };
  const int32_t rank = once(h.rank), claimed_size = once(h.size);
  if (rank != peer || claimed_size != size)
    throw invalid_usage(who + " is rank " + std::to_string(rank) + " of " +
                        std::to_string(claimed_size) + ", expected rank " + std::to_string(peer) +
                        " of " + std::to_string(size));
  Geometry claimed;
  claimed.peer_count = once(h.peer_count);
  claimed.ring_capacity = once(h.ring_capacity);
  claimed.table_slots = once(h.table_slots);
  claimed.total_bytes = once(h.total_bytes);
  claimed.peers_offset = once(h.peers_offset);
  claimed.cma_offset = once(h.cma_offset);
  claimed.rings_offset = once(h.rings_offset);
  claimed.ring_stride = once(h.ring_stride);
  claimed.table_offset = once(h.table_offset);
  claimed.slot_stride = once(h.slot_stride);
  const bool sane = claimed.peer_count < static_cast<uint32_t>(size) &&
                    claimed.ring_capacity >= 4096 && claimed.ring_capacity <= kMaxRingCapacity &&
                    (claimed.ring_capacity & (claimed.ring_capacity - 1)) == 0 &&
                    claimed.table_slots <= kMaxTableSlots;
  const Geometry g = sane ? make_geometry(claimed.peer_count, claimed.ring_capacity,
                                          claimed.table_slots)
                          : Geometry{};
  if (!sane || claimed.total_bytes != g.total_bytes || g.total_bytes > mapped ||
      claimed.peers_offset != g.peers_offset || claimed.cma_offset != g.cma_offset ||
      claimed.rings_offset != g.rings_offset || claimed.ring_stride != g.ring_stride ||
      claimed.table_offset != g.table_offset || claimed.slot_stride != g.slot_stride)
    throw remote_error(who + " has an inconsistent layout");
  const SegmentView view(base, g);
  for (uint32_t i = 0; i < g.peer_count; ++i)
    if (__atomic_load_n(&view.peer_ranks()[i], __ATOMIC_RELAXED) == our_rank) return {g, i};
  throw invalid_usage(who + " does not list rank " + std::to_string(our_rank) +
                      " as a shm peer: the ranks disagree on who shares this host");
}

}  // namespace plait::transport::shm
