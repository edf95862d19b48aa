// A write gathered from many local pieces (a dispatch's rows, scattered through the caller's
// tensor) into one range of a peer's region, by process_vm_writev with one local iovec per
// piece: the rows go once, straight from where they lie, with no packing copy before them.
// The copy runs inside the call, in chunks of about 1 MiB, each under its own pin, so that a
// deregistration waits for one chunk at most. A key the target has not published (its table
// was full) takes the ring like write() does, from a packed copy the operation owns.
#include <sys/uio.h>

#include <algorithm>
#include <cstring>

#include "transport/shm/cma.h"
#include "transport/shm/shm_fabric.h"

namespace plait::transport::shm {
namespace {

constexpr size_t kGatherChunk = 1 << 20;

}  // namespace

bool ShmFabric::gathers_writes(int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_ || index_of_[peer] < 0) return false;
  return peer_of(peer)->link.cma;
}

void ShmFabric::write_gathered(int peer, const std::vector<LocalPiece>& pieces, const RemoteKey& rk,
                               uint64_t remote_offset, std::optional<uint32_t> imm,
                               CompletionQueue* cq, uint64_t context) {
  Peer& p = *checked_peer(peer, "write_gathered");
  PolicyCompletionQueue* q = checked_cq(cq, "write_gathered");
  size_t len = 0;
  for (const LocalPiece& piece : pieces) len += piece.length;
  const ErrorContext ctx = call_context(peer, "write_gathered", len);
  for (const LocalPiece& piece : pieces)
    if (!piece.data && piece.length > 0) throw invalid_usage("null piece", ctx);
  if (!p.link.cma) return Fabric::write_gathered(peer, pieces, rk, remote_offset, imm, cq, context);  // refuses

  PinnedRegion region;
  if (p.failed.load() || !p.regions.pin(rk.key, &region)) {
    OpRef op = new_op(OpType::kWrite, peer, q, context);
    op->owned_source = std::make_unique<char[]>(std::max<size_t>(len, 1));
    size_t at = 0;
    for (const LocalPiece& piece : pieces) {
      if (piece.length > 0) std::memcpy(op->owned_source.get() + at, piece.data, piece.length);
      at += piece.length;
    }
    op->local = op->owned_source.get();
    op->length = len;
    if (!admit(op)) return;
    start_fallback_write(p, op, rk, remote_offset, imm);
    return;
  }
  if (std::string why = access_denial(rk.key, region.addr, region.length, region.access, remote_offset,
                                      len, AccessKind::kWrite);
      !why.empty()) {
    p.regions.unpin(region);
    return complete_now(q, OpType::kWrite, peer, len, 0, context,
                        std::make_shared<const Error>(denial(p, why, ctx)));
  }
  std::vector<iovec> chunk;
  chunk.reserve(std::min(pieces.size(), kCmaMaxPieces));
  size_t next = 0, within = 0, done = 0;  // pieces[next], `within` bytes in, is the first not sent
  bool pinned = true;
  while (done < len) {
    if (!pinned && !p.regions.repin(region))
      return complete_now(q, OpType::kWrite, peer, len, 0, context,
                          std::make_shared<const Error>(denial(
                              p, "key " + format_key(rk.key) + " was deregistered while the write was landing", ctx)));
    chunk.clear();
    size_t n = 0;
    while (next < pieces.size() && n < kGatherChunk && chunk.size() < kCmaMaxPieces) {
      const size_t take = std::min(pieces[next].length - within, kGatherChunk - n);
      if (take > 0)
        chunk.push_back({const_cast<char*>(static_cast<const char*>(pieces[next].data)) + within, take});
      n += take;
      within += take;
      if (within == pieces[next].length) ++next, within = 0;
    }
    const int err = cma_write_gathered(p.link.pid, chunk.data(), chunk.size(), region.addr + remote_offset + done, n);
    p.regions.unpin(region);
    pinned = false;
    if (err != 0)
      return complete_now(q, OpType::kWrite, peer, len, 0, context,
                          std::make_shared<const Error>(cma_error(p, err, "process_vm_writev", ctx)));
    done += n;
  }
  if (pinned) p.regions.unpin(region);
  if (imm) announce_write(p, rk.key, remote_offset, len, *imm);
  complete_now(q, OpType::kWrite, peer, len, 0, context);
}

}  // namespace plait::transport::shm
