#include "transport/shm/outbox.h"

#include <algorithm>
#include <cstring>

#include "transport/shm/doorbell.h"

namespace plait::transport::shm {

bool Outbox::try_write(const Record& r, const void* payload, size_t n) {
  std::lock_guard lock(mu_);
  return backlog_.empty() && ring_.write(r, payload, n);
}

void Outbox::post(Pending item) {
  std::vector<OpRef> sent;
  {
    std::lock_guard lock(mu_);
    backlog_.push_back(std::move(item));
    backlog_size_.store(backlog_.size(), std::memory_order_release);
    flush_locked(&sent);
  }
  report(sent);
  notify();
}

bool Outbox::flush() {
  if (!has_backlog()) return false;
  std::vector<OpRef> sent;
  bool wrote;
  {
    std::lock_guard lock(mu_);
    wrote = flush_locked(&sent);
  }
  report(sent);
  if (wrote) notify();
  return wrote;
}

void Outbox::clear() {
  std::lock_guard lock(mu_);
  backlog_.clear();
  backlog_size_.store(0, std::memory_order_release);
}

void Outbox::report(const std::vector<OpRef>& sent) {
  for (const OpRef& op : sent) on_sent_(op);
}

// What the front item needs to make progress: exactly the check emit_locked() makes.
size_t Outbox::next_bytes(const Pending& item) {
  switch (item.kind) {
    case Pending::Kind::kCopy: return record_bytes(item.bytes.size());
    case Pending::Kind::kEagerSend: return record_bytes(item.total);
    case Pending::Kind::kRegionRead:
      return record_bytes(std::max<size_t>(item.total, item.if_revoked.size()));
    case Pending::Kind::kStream: return record_bytes(std::min(item.chunk, item.total - item.sent));
  }
  return kRecordAlign;
}

bool Outbox::flush_locked(std::vector<OpRef>* sent) {
  bool wrote = false;
  for (;;) {
    while (!backlog_.empty()) {
      Emit e = emit_locked(backlog_.front(), sent);
      if (e != Emit::kFull) wrote = true;
      if (e != Emit::kDone) break;
      backlog_.pop_front();
    }
    // Ask the consumer to ring our doorbell when it frees room; if room appeared meanwhile,
    // go on now (the flag is then answered by a harmless extra wake-up).
    if (backlog_.empty() || !ring_.wait_for_room(next_bytes(backlog_.front()))) break;
  }
  backlog_size_.store(backlog_.size(), std::memory_order_release);
  return wrote;
}

Outbox::Emit Outbox::emit_locked(Pending& item, std::vector<OpRef>* sent) {
  switch (item.kind) {
    case Pending::Kind::kCopy:
      return ring_.write(item.header, item.bytes.data(), item.bytes.size()) ? Emit::kDone
                                                                            : Emit::kFull;
    case Pending::Kind::kEagerSend:
      // A cancelled send is not sent at all.
      if (item.op->done()) return Emit::kDone;
      if (!ring_.write(item.header, item.source, item.total)) return Emit::kFull;
      sent->push_back(item.op);
      return Emit::kDone;
    case Pending::Kind::kRegionRead: {
      Record r = item.header;
      if (!ring_.fits(record_bytes(std::max<size_t>(item.total, item.if_revoked.size()))))
        return Emit::kFull;
      if (auto pin = item.region->pin()) {
        ring_.write(r, item.region->base() + item.offset, item.total);
      } else {
        r.flags |= kFlagDenied;
        ring_.write(r, item.if_revoked.data(), item.if_revoked.size());
      }
      return Emit::kDone;
    }
    case Pending::Kind::kStream: {
      bool wrote = false;
      do {
        if (item.op->done()) {
          // Cancelled or failed midway. A rendezvous receiver waiting for the rest is told;
          // the rest of a write is simply not sent (nobody waits for its acknowledgements).
          if (item.header.type != RecordType::kData) return Emit::kDone;
          Record abort;
          abort.type = RecordType::kSendAborted;
          abort.id = item.header.id;
          return ring_.write(abort, nullptr, 0) ? Emit::kDone
                                                : (wrote ? Emit::kPartial : Emit::kFull);
        }
        const uint64_t n = std::min(item.chunk, item.total - item.sent);
        Record r = item.header;
        r.word += item.sent;
        if (!ring_.write(r, item.source + item.sent, n)) return wrote ? Emit::kPartial : Emit::kFull;
        item.sent += n;
        wrote = true;
      } while (item.sent < item.total);
      if (item.header.type == RecordType::kData) sent->push_back(item.op);
      return Emit::kDone;
    }
  }
  return Emit::kDone;
}

void Outbox::notify() { ring_doorbell(*peer_header_); }

}  // namespace plait::transport::shm
