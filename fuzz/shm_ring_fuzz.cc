// The shm provider's inbox (transport/shm/ring.h, record.h): a peer process writes records
// into a ring in shared memory, and RingReader::peek() is the one place their headers and
// lengths are checked before the drainer (shm/progress.cc) dispatches them. The input is a
// hostile producer's ring:
//
//   u16 start   where the consumer's head is, in records (the counters never wrap)
//   u32 tail    how many bytes past the head the producer claims to have published
//   rest        the ring's bytes from the head on, wrapping at the end
//
// Beyond "no crash": every record handed out lies inside the ring, has a consistent length,
// and the reader never advances past what was published.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz_support.h"
#include "transport/shm/ring.h"

using namespace plait::transport::shm;

namespace {

constexpr uint64_t kCapacity = 4096;  // the smallest ring a segment may have

uint64_t load_le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 6) return 0;
  const uint64_t head = load_le(data, 2) * kRecordAlign;
  const uint64_t published = load_le(data + 2, 4);
  data += 6;
  size -= 6;

  auto control = std::make_unique<RingControl>();
  // Exactly the ring, on the heap: a read past its end is AddressSanitizer's to catch.
  std::vector<char> ring(kCapacity);
  for (size_t i = 0; i < size && i < kCapacity; ++i)
    ring[(head + i) % kCapacity] = static_cast<char>(data[i]);
  control->head.store(head);
  control->tail.store(head + published);

  RingReader reader(control.get(), ring.data(), kCapacity);
  const char* const begin = ring.data();
  const char* const end = begin + kCapacity;
  uint64_t consumed = 0;
  // Every step consumes at least one record line, so a ring's worth of steps ends it.
  for (uint64_t step = 0; step <= kCapacity / kRecordAlign; ++step) {
    Record r;
    const char* payload = nullptr;
    const RingReader::Peek k = reader.peek(&r, &payload);
    if (k != RingReader::Peek::kRecord) {
      PLAIT_FUZZ_CHECK(k == RingReader::Peek::kCorrupt || consumed <= published);
      return 0;
    }
    PLAIT_FUZZ_CHECK(r.type != RecordType::kPad && r.type <= RecordType::kLast);
    PLAIT_FUZZ_CHECK(r.bytes == record_bytes(r.payload));
    PLAIT_FUZZ_CHECK(payload >= begin + sizeof(Record) && payload <= end);
    PLAIT_FUZZ_CHECK(r.payload <= static_cast<size_t>(end - payload));
    // What the drainer does with an eager payload: copy it out.
    std::vector<char> copy(payload, payload + r.payload);
    reader.consume(r);
    consumed += r.bytes;
    PLAIT_FUZZ_CHECK(consumed <= published);
  }
  PLAIT_FUZZ_CHECK(!"the reader handed out more records than the ring holds");
  return 0;
}
