// What the UCX provider's ranks say to each other: UCP active messages, one handler id per
// kind, a fixed header each. Payloads travel as the message's data (UCX picks eager or
// rendezvous by size; a rendezvous payload is pulled by the receiver into its final place).
// One-sided data does not travel here: it moves by UCP's put / get / atomics, and these
// messages only carry remote keys, their revocation and write immediates.
//
// Why active messages and not UCP's tag API: a plait message is matched on its source and a
// 64-bit tag and carries a 64-bit header word, while a UCP tag is 64 bits in all and names no
// source; packing the three into it would cost plait most of its tag space. The matching is
// plait's own TagMatcher (as in the other providers: the same order, any-source and sibling
// rules), and UCX still moves a large payload with zero copies.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace plait::transport::ucx {

enum AmId : unsigned {
  kAmHello = 1,        // setup: a rank's first message to each peer
  kAmMessage = 2,      // a two-sided message
  kAmImm = 3,          // a write's immediate, sent once the write is flushed to the target
  kAmImmDone = 4,      // the target delivered the immediate
  kAmGoodbye = 5,      // the sender shuts its fabric down; nothing follows
  kAmKeyRequest = 6,   // an initiator asks for a region's packed UCP remote key
  kAmKeyReply = 7,     // the region (base, length, access) and its packed key, or a denial
  kAmKeyRevoke = 8,    // the region is being deregistered: forget its key, flush, answer
  kAmKeyRevoked = 9,   // the initiator flushed every access it made with the key
};

inline constexpr uint32_t kHelloMagic = 0x706c7578;  // "plux"
inline constexpr uint32_t kWireVersion = 2;

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

struct KeyRequest {
  int32_t source = -1;
  uint32_t reserved = 0;
  uint64_t key = 0;
};

// The data of a kAmKeyReply: the packed UCP remote key, or (denied) the target's reason.
struct KeyReply {
  int32_t source = -1;
  uint32_t denied = 0;
  uint64_t key = 0;
  uint64_t base = 0;    // the region's address in the target's memory
  uint64_t length = 0;
  uint32_t access = 0;  // kAccess* flags
  uint32_t reserved = 0;
};

// kAmKeyRevoke and kAmKeyRevoked.
struct KeyRevoke {
  int32_t source = -1;
  uint32_t reserved = 0;
  uint64_t key = 0;
};

struct ImmHeader {
  int32_t source = -1;
  uint32_t imm = 0;
  uint64_t op = 0;      // the initiator's op, named in kAmImmDone
  uint64_t key = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

struct ImmDone {
  int32_t source = -1;
  uint32_t reserved = 0;
  uint64_t op = 0;
};

// A header's bytes, for an InFlight that keeps them until UCX is done reading.
template <typename T>
std::vector<char> bytes_of(const T& header) {
  const char* p = reinterpret_cast<const char*>(&header);
  return std::vector<char>(p, p + sizeof header);
}

// What arrives is checked by pure functions of the peer's bytes, which the handlers call and
// the fuzz target (fuzz/ucx_wire_fuzz.cc) runs: a header's size, the sender it names, a
// hello's job, and the text a goodbye or a denial carries.

// An arriving header of kind T: false (the message is dropped) when its size is not T's.
template <typename T>
bool read_header(const void* header, size_t header_bytes, T* out) {
  if (header_bytes != sizeof *out) return false;
  std::memcpy(out, header, sizeof *out);
  return true;
}

// The sender a header names, when it is one of the job's `size` ranks other than `self`
// (whether this provider serves it is the fabric's to say); -1 otherwise: the message is
// dropped.
inline int source_rank(int32_t source, int size, int self) {
  return source < 0 || source >= size || source == self ? -1 : source;
}

// A hello of this job's plait: the same magic, wire version and job size.
inline bool hello_matches(const HelloHeader& h, int size) {
  return h.magic == kHelloMagic && h.version == kWireVersion && h.size == size;
}

// kAmGoodbye's header is the sender's rank alone; -1 for a header of another size.
inline int32_t goodbye_source(const void* header, size_t header_bytes) {
  int32_t source = -1;
  if (header_bytes == sizeof source) std::memcpy(&source, header, sizeof source);
  return source;
}

// A denial's text is bounded: a reply is never a way to make the initiator allocate.
inline constexpr size_t kMaxDenialBytes = 1024;

// The text of a denial (kAmKeyReply) or a goodbye: at most kMaxDenialBytes of its data.
inline std::string_view bounded_text(const void* data, size_t length) {
  return {static_cast<const char*>(data), std::min<size_t>(length, kMaxDenialBytes)};
}

}  // namespace plait::transport::ucx
