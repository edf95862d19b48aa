// The TCP provider's wire format. Every message on a stream is one fixed 56-byte header,
// followed by `length` payload bytes on the same stream. Integers are in host byte order: the
// hello refuses a peer of the other endianness (static_assert below), so no swapping is paid
// per message.
//
//   offset size field   meaning by type
//   0      1    type    MessageType
//   1      1    flags   Flags
//   2      2    -       zero
//   4      4    imm     kWrite with kFlagImm: the immediate
//   8      8    id      the operation id the reply is matched against (see each type)
//   16     8    tag     kEager/kRts: message tag.  RMA requests: remote key
//   24     8    word    kEager/kRts: user header word.  kData: offset in the message.
//                       RMA requests: offset in the remote region
//   32     8    length  payload bytes following this header
//   40     8    arg0    see below
//   48     8    arg1    see below
//
// Two-sided (headers of a message always go over stream 0, so matching order = send order):
//   kEager    payload = the message.                            id unused
//   kRts      no payload; arg0 = message length.                id = sender's op id
//   kCts      receiver -> sender; id = sender's op id; arg0 = receiver's op id;
//             kFlagDeclined: the receive was truncated or gone, send nothing
//   kData     a stripe of a rendezvous message, on the (i % live streams)-th live stream;
//             id = receiver's op id, word = offset in the message, payload = the stripe
//   kDataAck  receiver -> sender, stream 0: every stripe is in (the send completes on it,
//             so that its stripes can be sent again while it lasts); id = sender's op id;
//             kFlagDeclined: the receive was cancelled meanwhile
// One-sided (request pieces are striped like kData; replies go back on the same stream):
//   kWrite     payload lands at region offset `word`; id = initiator op id;
//              arg0 = the whole write's length, arg1 = its first region offset (for the
//              immediate's completion once every piece is in)
//   kWriteAck  id; arg0 = bytes acknowledged; kFlagDenied: payload = the reason text
//   kReadReq   id; tag/word = key/region offset; arg0 = offset in the initiator's buffer,
//              arg1 = bytes to read (no payload)
//   kReadResp  id; arg0 echoed; payload = the data, or the reason text with kFlagDenied
//   kAtomic    id; tag/word = key/region offset; arg0 = add or expected, arg1 = desired;
//              kFlagCompareSwap selects compare-and-swap, else fetch-and-add
//   kAtomicResp id; arg0 = the old value, or kFlagDenied + reason text
// Connection:
//   kGoodbye  the sender is shutting down; nothing follows on this stream; payload: why it
//             lost its first peer, if it did (OpLifecycle::first_loss), else none
//   kStreamLost  stream 0: stream arg0 broke here; its sender sends its stripes again
//             over the others, and neither side uses it any more
//   kKeepAlive  no payload, on stream 0: the sender is alive (sent when it has had nothing
//             else to send for PLAIT_KEEPALIVE), so a silent peer is one that is gone
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace plait::transport::tcp {

static_assert(std::endian::native == std::endian::little,
              "the tcp wire format is little-endian host order");

enum class MessageType : uint8_t {
  kEager = 1,
  kRts,
  kCts,
  kData,
  kWrite,
  kWriteAck,
  kReadReq,
  kReadResp,
  kAtomic,
  kAtomicResp,
  kGoodbye,
  kKeepAlive,
  kDataAck,
  kStreamLost,
};

// Replies that a peer's transfer waits on and that no other frame's order depends on: they
// go out before the data frames queued on their stream (not before one already started).
// Behind megabytes of striped data, a clear-to-send held the peer's own transfer back until
// ours had drained: both directions of an exchange took turns instead of running at once.
constexpr bool is_urgent_reply(MessageType t) {
  return t == MessageType::kCts || t == MessageType::kDataAck ||
         t == MessageType::kWriteAck || t == MessageType::kAtomicResp ||
         t == MessageType::kKeepAlive;
}

enum Flags : uint8_t {
  kFlagImm = 1u << 0,
  kFlagDenied = 1u << 1,
  kFlagDeclined = 1u << 2,
  kFlagCompareSwap = 1u << 3,
};

struct WireHeader {
  MessageType type{};
  uint8_t flags = 0;
  uint16_t reserved = 0;
  uint32_t imm = 0;
  uint64_t id = 0;
  uint64_t tag = 0;
  uint64_t word = 0;
  uint64_t length = 0;
  uint64_t arg0 = 0;
  uint64_t arg1 = 0;
};
static_assert(sizeof(WireHeader) == 56, "wire header layout changed");

// The longest reason text a denial carries; anything longer from a peer is a protocol error.
inline constexpr size_t kMaxReasonBytes = 4096;

// Sent once per socket by each side after the job-token handshake.
struct Hello {
  uint32_t magic = kHelloMagic;
  uint16_t version = kWireVersion;
  uint16_t stream = 0;
  int32_t rank = -1;
  int32_t size = 0;
  uint16_t streams = 0;
  uint16_t flags = 0;        // kHelloIntegrity
  uint32_t name_length = 0;  // the fabric's name follows
  static constexpr uint32_t kHelloMagic = 0x46544c50;  // "PLTF"
  static constexpr uint16_t kWireVersion = 3;
  // PLAIT_TCP_INTEGRITY=1: every frame carries tags (integrity.h); both sides must agree.
  static constexpr uint16_t kHelloIntegrity = 1;
};
static_assert(sizeof(Hello) == 24, "hello layout changed");

}  // namespace plait::transport::tcp
