// A single-producer single-consumer byte ring in shared memory: one per ordered pair of
// ranks, living in the receiver's segment. Records (record.h) are written whole and never
// wrap: a record that does not fit before the end is preceded by a kPad record that fills
// it. `tail` and `head` count bytes since the ring's creation (they never wrap), each on its
// own cache line and written by one side only; the producer keeps a cached copy of `head` so
// that it reads the consumer's line only when the ring looks full.
//
// Memory order: the producer writes a record, then publishes it with a release store of
// `tail`; the consumer's acquire load of `tail` makes the record visible. The consumer
// releases the space with a store of `head` once it is done with the bytes (an eager payload
// is copied straight out of the ring into the receive buffer before that).
//
// Full ring: the producer sets `producer_waiting` and re-checks for space; the consumer,
// after releasing space, checks the flag and rings the producer's doorbell. Both sides use
// seq_cst between their store and their load, so at least one of them sees the other.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "transport/shm/record.h"

namespace plait::transport::shm {

struct RingControl {
  alignas(64) std::atomic<uint64_t> tail{0};  // producer
  alignas(64) std::atomic<uint64_t> head{0};  // consumer
  alignas(64) std::atomic<uint32_t> producer_waiting{0};
};
static_assert(sizeof(RingControl) == 192);
inline constexpr size_t kRingControlBytes = 256;

// The producer's side. Not thread-safe: the caller serializes (Outbox holds a lock).
class RingWriter {
 public:
  RingWriter() = default;
  RingWriter(RingControl* control, char* data, uint64_t capacity)
      : control_(control), data_(data), capacity_(capacity),
        tail_(control->tail.load(std::memory_order_relaxed)),
        head_cache_(control->head.load(std::memory_order_acquire)) {}

  uint64_t capacity() const { return capacity_; }
  // The largest record this ring takes: a quarter of it, so that records pipeline.
  size_t max_record() const { return capacity_ / 4; }

  // Room for a record of `bytes` (a multiple of kRecordAlign), padding the ring's end if
  // needed; null when the ring is full. The record is not visible until publish().
  Record* reserve(size_t bytes) {
    uint64_t pos = tail_ % capacity_;
    uint64_t to_end = capacity_ - pos;
    uint64_t need = to_end < bytes ? to_end + bytes : bytes;
    if (!has_room(need)) return nullptr;
    if (to_end < bytes) {
      auto* pad = reinterpret_cast<Record*>(data_ + pos);
      *pad = Record{};
      pad->bytes = static_cast<uint32_t>(to_end);
      pad->type = RecordType::kPad;
      tail_ += to_end;
      pos = 0;
    }
    auto* r = reinterpret_cast<Record*>(data_ + pos);
    tail_ += bytes;
    return r;
  }

  // Makes every reserved record visible to the consumer.
  void publish() { control_->tail.store(tail_, std::memory_order_release); }

  // Writes and publishes a record with a payload; false when the ring is full.
  bool write(const Record& header, const void* payload, size_t n) {
    const size_t bytes = record_bytes(n);
    Record* r = reserve(bytes);
    if (!r) return false;
    *r = header;
    r->bytes = static_cast<uint32_t>(bytes);
    r->payload = static_cast<uint32_t>(n);
    if (n > 0) std::memcpy(r + 1, payload, n);
    publish();
    return true;
  }

  // Whether a record of `bytes` fits now (re-reading the consumer's head if needed).
  bool fits(size_t bytes) {
    uint64_t to_end = capacity_ - tail_ % capacity_;
    return has_room(to_end < bytes ? to_end + bytes : bytes);
  }

  // The full-ring handshake: the flag first, then one more look (seq_cst pairs with the
  // consumer's release-then-check).
  bool wait_for_room(size_t bytes) {
    control_->producer_waiting.store(1, std::memory_order_seq_cst);
    head_cache_ = control_->head.load(std::memory_order_seq_cst);
    return fits(bytes);
  }

 private:
  bool has_room(uint64_t need) {
    if (tail_ + need - head_cache_ <= capacity_) return true;
    head_cache_ = control_->head.load(std::memory_order_acquire);
    return tail_ + need - head_cache_ <= capacity_;
  }

  RingControl* control_ = nullptr;
  char* data_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t tail_ = 0;
  uint64_t head_cache_ = 0;
};

// The consumer's side. Not thread-safe: one drainer at a time (the fabric's drain lock).
class RingReader {
 public:
  RingReader() = default;
  RingReader(RingControl* control, char* data, uint64_t capacity)
      : control_(control), data_(data), capacity_(capacity),
        head_(control->head.load(std::memory_order_relaxed)), released_(head_) {}

  // Whether a record may be waiting (a cheap look at the producer's line).
  bool maybe_ready() const { return control_->tail.load(std::memory_order_relaxed) != head_; }

  enum class Peek { kEmpty, kRecord, kCorrupt };
  // The next record; skips padding. kCorrupt: the producer wrote something no record is.
  // The header is copied into *header before it is checked, and only the copy is used from
  // then on: the producer can rewrite the ring at any time, so a length read twice could
  // pass the check and then steer a copy. *payload points into the ring, at header->payload
  // bytes that lie inside it.
  Peek peek(Record* header, const char** payload) {
    for (;;) {
      if (avail_ == 0) {
        avail_ = control_->tail.load(std::memory_order_acquire) - head_;
        if (avail_ == 0) return Peek::kEmpty;
        if (avail_ > capacity_ || avail_ % kRecordAlign != 0) return Peek::kCorrupt;
      }
      const char* at = data_ + head_ % capacity_;
      std::memcpy(header, at, sizeof(Record));
      const Record& r = *header;
      if (r.bytes < kRecordAlign || r.bytes % kRecordAlign != 0 || r.bytes > avail_ ||
          r.bytes > capacity_ - head_ % capacity_ || r.type > RecordType::kLast ||
          (r.type != RecordType::kPad && record_bytes(r.payload) != r.bytes))
        return Peek::kCorrupt;
      if (r.type == RecordType::kPad) {
        advance(r.bytes);
        continue;
      }
      *payload = at + sizeof(Record);
      return Peek::kRecord;
    }
  }

  // Done with the record from peek() (its checked header): its space goes back to the
  // producer at release().
  void consume(const Record& header) { advance(header.bytes); }

  // Hands consumed space back; true if the producer waits for it (then ring its doorbell).
  bool release() {
    if (released_ == head_) return false;
    released_ = head_;
    control_->head.store(head_, std::memory_order_seq_cst);
    if (control_->producer_waiting.load(std::memory_order_seq_cst) == 0) return false;
    // An exchange, not a store: a flag the producer set again meanwhile is answered too.
    return control_->producer_waiting.exchange(0, std::memory_order_seq_cst) != 0;
  }

 private:
  void advance(uint64_t bytes) {
    head_ += bytes;
    avail_ -= bytes;
  }

  RingControl* control_ = nullptr;
  char* data_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t head_ = 0;
  uint64_t released_ = 0;
  uint64_t avail_ = 0;  // bytes known published beyond head_
};

}  // namespace plait::transport::shm
