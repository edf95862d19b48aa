// The shuffle's messages from peers (shuffle/wire.h), checked as the shuffle checks them: a
// mapper's location message (send_locations()), a reducer's read request (serve()), credit
// (serve_credit()) and target (push_round()). The input:
//
//   u8  what: 0 locations, 1 a read request, 2 a credit, 3 a target (the value mod 4); for
//       locations, bit 2 asks the harness to write the header entry (the block count and
//       their sum, wrapping as a lying mapper's would): the blocks alone are then the input
//   locations  u8 record bytes (0: 100), then the message (at most kMaxRuns + 1 entries)
//   request    u64 the spill file's size, then the message
//   credit     u8 n (mod 9), n x u64 the mapper's blocks for this reducer, then the message
//   target     u64 the bytes of the reducer's partition this mapper holds, then the message
//
// Beyond "no crash": an accepted location message's blocks add up to its total, each of
// whole records, and the reducer's layout of them (receive_pull()) stays inside its
// partition, whose total over the mappers never wraps (partition_total()); a request is served inside the file; a credit names bytes inside one of the
// mapper's blocks (never the header entry); a target is whole and expects what we hold.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_support.h"
#include "plait/error.h"
#include "plait/shuffle.h"
#include "shuffle/wire.h"

using namespace plait;
using namespace plait::shuffle;

namespace {

constexpr int kRank = 0, kPeer = 1;

template <typename T>
bool take(const uint8_t*& data, size_t& size, T* out) {
  if (size < sizeof *out) return false;
  std::memcpy(out, data, sizeof *out);
  data += sizeof *out;
  size -= sizeof *out;
  return true;
}

// The message as the receive posted for it holds it: a buffer of `capacity` entries of T,
// zero beyond what came (a longer message fails at the transport).
template <typename T>
bool received(const uint8_t* data, size_t size, size_t capacity, std::vector<T>* out) {
  if (size > capacity * sizeof(T)) return false;
  out->assign(capacity, T{});
  if (size > 0) std::memcpy(out->data(), data, size);
  return true;
}

void expect_remote(const Error& e) { PLAIT_FUZZ_CHECK(e.category() == ErrorCategory::kRemote); }

void locations(const uint8_t* data, size_t size, bool write_header) {
  uint8_t rb = 0;
  if (!take(data, size, &rb)) return;
  const size_t record_bytes = rb == 0 ? 100 : rb;
  std::vector<BlockWire> in;
  if (!received(data, size, Shuffle::kMaxRuns + 1, &in)) return;
  if (write_header && size >= sizeof(BlockWire)) {
    const size_t entries = size / sizeof(BlockWire);
    in[0].offset = entries - 1;
    in[0].bytes = 0;
    for (size_t i = 1; i < entries; ++i) in[0].bytes += in[i].bytes;
  }
  Locations got;
  try {
    got = check_locations(in.data(), size, record_bytes, kPeer, kRank);
  } catch (const Error& e) {
    return expect_remote(e);
  }
  PLAIT_FUZZ_CHECK(got.blocks == size / sizeof(BlockWire) - 1 && got.blocks <= Shuffle::kMaxRuns);
  // receive_pull(): block i lands at the sum of the blocks before it, in a partition buffer
  // of the total's size; merge_fetched() steps through it a record at a time.
  uint64_t at = 0;
  for (size_t i = 1; i <= got.blocks; ++i) {
    const uint64_t b = in[i].bytes;
    PLAIT_FUZZ_CHECK(b % record_bytes == 0);
    PLAIT_FUZZ_CHECK(b <= got.total && at <= got.total - b);
    at += b;
  }
  PLAIT_FUZZ_CHECK(at == got.total);
  // The partition when two mappers send this: its total, or refused rather than wrapped.
  try {
    const uint64_t both = partition_total({got.total, got.total}, kRank);
    PLAIT_FUZZ_CHECK(both >= got.total && both - got.total == got.total);
  } catch (const Error& e) {
    expect_remote(e);
    PLAIT_FUZZ_CHECK(got.total > UINT64_MAX - got.total);
  }
}

void request(const uint8_t* data, size_t size) {
  uint64_t file_bytes = 0;
  if (!take(data, size, &file_bytes)) return;
  std::vector<RequestWire> in;
  if (!received(data, size, 1, &in)) return;
  try {
    check_request(size, kPeer, kRank);
  } catch (const Error& e) {
    return expect_remote(e);
  }
  const uint64_t served = served_bytes(in[0], file_bytes);
  PLAIT_FUZZ_CHECK(served == 0 || served == in[0].bytes);
  PLAIT_FUZZ_CHECK(served == 0 || (in[0].offset <= file_bytes && served <= file_bytes - in[0].offset));
}

void credit(const uint8_t* data, size_t size) {
  uint8_t n = 0;
  if (!take(data, size, &n)) return;
  n %= 9;
  // The mapper's blocks for the reducer as sent in its location message: the header first.
  std::vector<BlockWire> blocks(1);
  for (uint8_t i = 0; i < n; ++i) {
    BlockWire b;
    if (!take(data, size, &b.bytes)) return;
    b.offset = 4096 * i;
    blocks.push_back(b);
    blocks[0].bytes += b.bytes;
  }
  blocks[0].offset = n;
  std::vector<CreditWire> in;
  if (!received(data, size, 1, &in)) return;
  const CreditWire& c = in[0];
  try {
    check_credit(c, size, blocks, kPeer, kRank);
  } catch (const Error& e) {
    return expect_remote(e);
  }
  // pump_pushes(): own_[reducer][block + 1], bytes offset .. offset + bytes of it.
  PLAIT_FUZZ_CHECK(size == sizeof(CreditWire));
  PLAIT_FUZZ_CHECK(c.block < n);
  const BlockWire& b = blocks[c.block + 1];
  PLAIT_FUZZ_CHECK(c.offset <= b.bytes && c.bytes <= b.bytes - c.offset);
}

void target(const uint8_t* data, size_t size) {
  uint64_t have = 0;
  if (!take(data, size, &have)) return;
  std::vector<BlockWire> in;
  if (!received(data, size, 1, &in)) return;
  try {
    check_target(in[0], size, have, kPeer, kRank);
  } catch (const Error& e) {
    return expect_remote(e);
  }
  PLAIT_FUZZ_CHECK(size == sizeof(BlockWire) && in[0].bytes == have);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t what = data[0] % 4;
  const bool write_header = data[0] & 4;
  ++data;
  --size;
  switch (what) {
    case 0: locations(data, size, write_header); break;
    case 1: request(data, size); break;
    case 2: credit(data, size); break;
    default: target(data, size); break;
  }
  return 0;
}
