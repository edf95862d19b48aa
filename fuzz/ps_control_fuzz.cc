// The parameter server's control messages (ps/wire.h), decoded by ps/control.h as the server's
// on_message() and the worker's on_control() take them. The input:
//
//   u8  bits 0-3: the direction (bit 0: 0 to a server, 1 to a worker) and, for a worker,
//       bits 1-5 how many of its 16 ring slots on that server it holds (has written into)
//   u8  the message's header word (its kind; 6 and up are kinds nobody sends)
//   rest  the message, at most the receiver's inbox (a longer one fails at the transport)
//
// Beyond "no crash": a pull request is the message's bytes as they are; credits name the
// message's slot indices and give back only slots the worker holds (SlotRing, as the worker
// runs it: its free queue never holds a slot twice); a failure's reason is the rest of the
// message and its category one that exists (Python and every switch on it know it).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "plait/error.h"
#include "ps/control.h"
#include "ps/slot_ring.h"

using namespace plait;
using namespace plait::ps;

namespace {

constexpr size_t kServerInbox = 128;  // server.h: the server's receive buffers
constexpr uint32_t kSlots = 16;

bool known(ErrorCategory c) {
  switch (c) {
    case ErrorCategory::kInvalidUsage:
    case ErrorCategory::kTimeout:
    case ErrorCategory::kRemote:
    case ErrorCategory::kSystem:
    case ErrorCategory::kAborted:
      return true;
  }
  return false;
}

void to_server(uint64_t header, const std::byte* msg, size_t bytes) {
  const wire::ToServer m = wire::decode_to_server(header, msg, bytes);
  switch (m.what) {
    case wire::ToServer::What::kPullRequest:
      PLAIT_FUZZ_CHECK(header == static_cast<uint64_t>(wire::Kind::kPullRequest));
      PLAIT_FUZZ_CHECK(bytes == sizeof m.request);
      PLAIT_FUZZ_CHECK(std::memcmp(&m.request, msg, bytes) == 0);
      break;
    case wire::ToServer::What::kDone:
      PLAIT_FUZZ_CHECK(header == static_cast<uint64_t>(wire::Kind::kDone));
      break;
    case wire::ToServer::What::kMalformed:
      break;
  }
}

void to_worker(uint64_t header, const std::byte* msg, size_t bytes, uint32_t held) {
  const wire::ToWorker m = wire::decode_to_worker(header, msg, bytes);
  switch (m.what) {
    case wire::ToWorker::What::kCredits: {
      PLAIT_FUZZ_CHECK(header == static_cast<uint64_t>(wire::Kind::kCredits));
      PLAIT_FUZZ_CHECK(bytes == sizeof(wire::Credits) + size_t{m.count} * sizeof(uint32_t));
      // The worker's ring: `held` slots written, not yet handed back.
      SlotRing ring(kSlots);
      std::vector<bool> holds(kSlots, false);
      for (uint32_t i = 0; i < held; ++i) holds[ring.take()] = true;
      for (uint32_t i = 0; i < m.count; ++i) {
        const uint32_t slot = m.slot(i);
        uint32_t expected;
        std::memcpy(&expected, msg + sizeof(wire::Credits) + size_t{i} * 4, 4);
        PLAIT_FUZZ_CHECK(slot == expected);
        const bool was_held = slot < kSlots && holds[slot];
        PLAIT_FUZZ_CHECK(ring.give_back(slot) == was_held);
        if (was_held) holds[slot] = false;
      }
      uint32_t still_held = 0;
      for (bool h : holds) still_held += h;
      PLAIT_FUZZ_CHECK(ring.available() + still_held == kSlots);
      // Every free slot is taken once, and then the ring is empty.
      std::vector<bool> seen(kSlots, false);
      while (!ring.empty()) {
        const uint32_t s = ring.take();
        PLAIT_FUZZ_CHECK(s < kSlots && !seen[s] && !holds[s]);
        seen[s] = true;
      }
      break;
    }
    case wire::ToWorker::What::kDoneAck:
      PLAIT_FUZZ_CHECK(header == static_cast<uint64_t>(wire::Kind::kDoneAck));
      break;
    case wire::ToWorker::What::kFailure: {
      PLAIT_FUZZ_CHECK(header == static_cast<uint64_t>(wire::Kind::kFailure));
      PLAIT_FUZZ_CHECK(bytes >= sizeof(wire::FailureHeader));
      PLAIT_FUZZ_CHECK(m.reason.size() == bytes - sizeof(wire::FailureHeader));
      PLAIT_FUZZ_CHECK(known(m.category));
      // What the worker makes of it.
      const Error e(m.category, std::string(m.reason), ErrorContext{.rank = 1, .peer = 0, .op = "pull of key 7"});
      PLAIT_FUZZ_CHECK(!std::string(e.what()).empty());
      break;
    }
    case wire::ToWorker::What::kMalformed:
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const bool worker = data[0] & 1;
  const uint32_t held = (data[0] >> 1) % (kSlots + 1);
  const uint64_t header = data[1];
  data += 2;
  size -= 2;
  if (size > (worker ? wire::kMaxMessageBytes : kServerInbox)) return 0;  // truncated: an error
  // The receiver's inbox: aligned as an array of bytes, no more.
  std::vector<std::byte> inbox(size);
  if (size > 0) std::memcpy(inbox.data(), data, size);
  if (worker) to_worker(header, inbox.data(), size, held);
  else to_server(header, inbox.data(), size);
  return 0;
}
