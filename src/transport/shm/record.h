// The messages of the shm provider: fixed 64-byte records, each followed by its payload, in
// the SPSC rings between two ranks (see ring.h). One cache line per header keeps a small
// message at two lines (header + payload) and every record line-aligned.
//
//   type         id             tag      word           arg0              arg1           payload
//   kEager       -              tag      header word    -                 -              message
//   kRts         sender op      tag      header word    length            sender address -
//   kCts         sender op      -        -              receiver op       -              -
//   kFin         sender op      -        -              -                 -              -
//   kData        receiver op    -        offset         -                 -              piece
//   kSendAborted receiver op    -        -              -                 -              -
//   kWrite       initiator op   key      remote offset  write's length    write's offset piece
//   kWriteImm    -              key      remote offset  length            -              -
//   kWriteAck    initiator op   -        -              piece bytes       -              denial
//   kReadReq     initiator op   key      remote offset  local offset      piece bytes    -
//   kReadResp    initiator op   -        -              local offset      -              data/denial
//   kAtomic      initiator op   key      remote offset  add / expected    desired        -
//   kAtomicResp  initiator op   -        -              old value         -              denial
//
// kRts with kFlagCma: the receiver pulls the payload itself with process_vm_readv and answers
// kFin; without it, the receiver answers kCts and the sender pushes kData pieces through the
// ring (the copy fallback). kWriteImm follows a write done by cross-memory attach: the data is
// already in place when the target reads it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace plait::transport::shm {

enum class RecordType : uint8_t {
  kPad = 0,  // fills the ring's end when the next record does not fit before it
  kEager,
  kRts,
  kCts,
  kFin,
  kData,
  kSendAborted,
  kWrite,
  kWriteImm,
  kWriteAck,
  kReadReq,
  kReadResp,
  kAtomic,
  kAtomicResp,
  kLast = kAtomicResp,
};

enum RecordFlags : uint8_t {
  kFlagCma = 1u << 0,          // kRts: pull with cross-memory attach
  kFlagDeclined = 1u << 1,     // kCts/kFin: the receiver does not take the payload
  kFlagFailed = 1u << 2,       // kFin: the receiver could not read the sender's buffer
  kFlagImm = 1u << 3,          // kWrite: carries an immediate
  kFlagDenied = 1u << 4,       // replies: the payload is the reason
  kFlagCompareSwap = 1u << 5,  // kAtomic: compare-and-swap (else fetch-and-add)
};

inline constexpr size_t kRecordAlign = 64;

struct Record {
  uint32_t bytes = 0;    // header + payload, rounded up to kRecordAlign: the ring advance
  RecordType type = RecordType::kPad;
  uint8_t flags = 0;
  uint16_t reserved = 0;
  uint32_t payload = 0;  // payload bytes
  uint32_t imm = 0;
  uint64_t id = 0;
  uint64_t tag = 0;
  uint64_t word = 0;
  uint64_t arg0 = 0;
  uint64_t arg1 = 0;
  uint64_t spare = 0;
};
static_assert(sizeof(Record) == kRecordAlign);

inline constexpr size_t record_bytes(size_t payload) {
  return (sizeof(Record) + payload + kRecordAlign - 1) / kRecordAlign * kRecordAlign;
}

// A denial's reason is cut to this length, so that a reply always fits a ring.
inline constexpr size_t kMaxReasonBytes = 1024;

}  // namespace plait::transport::shm
