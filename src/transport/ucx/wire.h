// What the UCX provider's ranks say to each other: UCP active messages, one handler id per
// kind, a fixed header each. Payloads travel as the message's data (UCX picks eager or
// rendezvous by size; a rendezvous payload is pulled by the receiver into its final place).
//
// Why active messages and not UCP's tag API: a plait message is matched on its source and a
// 64-bit tag and carries a 64-bit header word, while a UCP tag is 64 bits in all and names no
// source; packing the three into it would cost plait most of its tag space. The matching is
// plait's own TagMatcher (as in the other providers: the same order, any-source and sibling
// rules), and UCX still moves a large payload with zero copies.
#pragma once

#include <cstdint>

namespace plait::transport::ucx {

enum AmId : unsigned {
  kAmHello = 1,    // setup: a rank's first message to each peer
  kAmMessage = 2,  // a two-sided message
  kAmRma = 3,      // a one-sided request: write (with its data), read, atomic
  kAmReply = 4,    // the target's answer to an RMA request
  kAmGoodbye = 5,  // the sender shuts its fabric down; nothing follows
};

inline constexpr uint32_t kHelloMagic = 0x706c7578;  // "plux"
inline constexpr uint32_t kWireVersion = 1;

struct HelloHeader {
  uint32_t magic = kHelloMagic;
  uint32_t version = kWireVersion;
  int32_t source = -1;
  int32_t size = 0;
};

struct MessageHeader {
  int32_t source = -1;
  uint32_t reserved = 0;
  uint64_t tag = 0;
  uint64_t word = 0;  // the sender's header word
};

enum class RmaKind : uint8_t { kWrite = 1, kRead = 2, kFetchAdd = 3, kCompareSwap = 4 };

struct RmaHeader {
  int32_t source = -1;
  RmaKind kind = RmaKind::kWrite;
  uint8_t has_imm = 0;
  uint16_t reserved = 0;
  uint32_t imm = 0;
  uint32_t reserved2 = 0;
  uint64_t op = 0;      // the initiator's op, named in the reply
  uint64_t key = 0;     // the region's key
  uint64_t offset = 0;  // into the region
  uint64_t length = 0;  // write / read: bytes
  uint64_t arg0 = 0;    // fetch_add: the addend; compare_swap: the expected value
  uint64_t arg1 = 0;    // compare_swap: the desired value
};

struct ReplyHeader {
  int32_t source = -1;
  uint32_t denied = 0;  // 1: the payload is the target's reason, nothing was touched
  uint64_t op = 0;
  uint64_t value = 0;   // atomics: the old value
};

// A denial's text is bounded: a reply is never a way to make the initiator allocate.
inline constexpr size_t kMaxDenialBytes = 1024;

}  // namespace plait::transport::ucx
