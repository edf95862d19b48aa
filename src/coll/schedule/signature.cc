#include "coll/schedule/signature.h"

#include <sstream>

namespace plait::coll {
using signature_bits::kCountBits, signature_bits::kRootBits, signature_bits::kRedopBits,
    signature_bits::kDtypeBits, signature_bits::kOpBits, signature_bits::kSeqBits,
    signature_bits::mask;

Signature Signature::unpack(uint64_t w) {
  Signature s;
  s.count = w & mask(kCountBits);
  w >>= kCountBits;
  s.root = static_cast<int>(w & mask(kRootBits)) - 1;
  w >>= kRootBits;
  s.redop = static_cast<ReduceOp>(w & mask(kRedopBits));
  w >>= kRedopBits;
  s.dtype = static_cast<DataType>(w & mask(kDtypeBits));
  w >>= kDtypeBits;
  s.op = static_cast<CollOp>(w & mask(kOpBits));
  w >>= kOpBits;
  s.seq = w & mask(kSeqBits);
  return s;
}

std::string Signature::describe() const {
  std::ostringstream out;
  out << to_string(op) << " #" << seq << " (count " << count << ", " << to_string(dtype);
  if (op_reduces(op)) out << ", " << to_string(redop);
  if (op_has_root(op)) out << ", root " << root;
  out << ")";
  return out.str();
}

std::string mismatch_message(const Signature& mine, uint64_t theirs_packed, int peer) {
  // Compare as the wire sees it: truncate ours the same way.
  Signature here = Signature::unpack(mine.pack());
  Signature there = Signature::unpack(theirs_packed);
  std::ostringstream out;
  out << "collective mismatch: this rank is in " << mine.describe() << " but rank " << peer
      << " is in " << there.describe() << " (differs in";
  const char* sep = " ";
  auto differs = [&](bool d, const char* what) {
    if (d) {
      out << sep << what;
      sep = ", ";
    }
  };
  differs(here.seq != there.seq, "sequence number");
  differs(here.op != there.op, "operation");
  differs(here.dtype != there.dtype, "dtype");
  differs(here.redop != there.redop, "reduction op");
  differs(here.root != there.root, "root");
  differs(here.count != there.count, "count");
  out << "); every rank must issue the same collectives in the same order";
  return out.str();
}

}  // namespace plait::coll
