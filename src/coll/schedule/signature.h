// What every collective message carries so that ranks which disagree about the collective
// they are in find out at the first message instead of hanging or corrupting data.
//
// The signature travels in the transport's 64-bit header word:
//   seq (20 bits) | op (4) | dtype (4) | redop (3) | root (13) | count (20)
// Fields wider than their slot are truncated to their low bits: a mismatch that differs only
// above them (sequence numbers 2^20 apart, counts differing by a multiple of 2^20) goes
// unnoticed, everything else is caught. For v-variants `count` is the sum of the counts
// every rank agrees on (alltoallv: 0, its counts legitimately differ per rank).
#pragma once

#include <cstdint>
#include <string>

#include "coll/schedule/schedule.h"

namespace plait::coll {

namespace signature_bits {
constexpr int kCountBits = 20, kRootBits = 13, kRedopBits = 3, kDtypeBits = 4, kOpBits = 4,
              kSeqBits = 20;
constexpr uint64_t mask(int bits) { return (uint64_t{1} << bits) - 1; }
}  // namespace signature_bits

struct Signature {
  uint64_t seq = 0;
  CollOp op = CollOp::kAllreduce;
  DataType dtype = DataType::kF32;
  ReduceOp redop = ReduceOp::kSum;
  int root = -1;     // -1: the op has no root
  uint64_t count = 0;

  // Inline: every collective packs its own, once per call.
  uint64_t pack() const {
    using namespace signature_bits;
    uint64_t w = seq & mask(kSeqBits);
    w = (w << kOpBits) | (static_cast<uint64_t>(op) & mask(kOpBits));
    w = (w << kDtypeBits) | (static_cast<uint64_t>(dtype) & mask(kDtypeBits));
    w = (w << kRedopBits) | (static_cast<uint64_t>(redop) & mask(kRedopBits));
    w = (w << kRootBits) | (static_cast<uint64_t>(root + 1) & mask(kRootBits));
    w = (w << kCountBits) | (count & mask(kCountBits));
    return w;
  }
  static Signature unpack(uint64_t word);
  // "allreduce #5 (count 1024, f32, sum)" with the fields the op uses, as far as the wire
  // carries them.
  std::string describe() const;
};

// The error text for a message whose signature differs from ours, naming the differences.
std::string mismatch_message(const Signature& mine, uint64_t theirs_packed, int peer);

inline bool op_has_root(CollOp op) {
  return op == CollOp::kReduce || op == CollOp::kBroadcast || op == CollOp::kGather ||
         op == CollOp::kScatter;
}
inline bool op_reduces(CollOp op) {
  return op == CollOp::kAllreduce || op == CollOp::kReduce || op == CollOp::kReduceScatter ||
         op == CollOp::kReduceScatterv;
}

}  // namespace plait::coll
