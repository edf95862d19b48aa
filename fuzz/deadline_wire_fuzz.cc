// The deadline allreduce's wire format (coll/deadline/wire.h): a rank's contribution header as
// the aggregator takes it (wire::check_contribution(), then the shape check's chunking and the
// values' receives), and a step's result header as a rank takes it
// (wire::ResultHeader::decode(), then what deadline_allreduce.cc reads from it). The input:
//
//   u8  bit 0: 0 a contribution to step 5, 1 a result; bits 1-3: the aggregator's chunk_bytes
//       (0, 1, 100, 4096, 1 MiB, 64 MiB, 1 GiB, 2^40)
//   u8  result: the job's size - 1
//   u8  result: the step's chunks - 1 (up to 256)
//   rest  the message, at most its receive buffer (a longer one fails at the transport)
//
// Beyond "no crash": an accepted contribution names a dtype and op that exist and cuts its
// values into chunks that tile them; an accepted result header re-encodes to its bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "coll/deadline/wire.h"
#include "fuzz_support.h"
#include "plait/error.h"
#include "plait/types.h"

using namespace plait;
using namespace plait::deadline;

namespace {

constexpr uint64_t kStep = 5;
constexpr size_t kChunkBytes[] = {0, 1, 100, 4096, size_t{1} << 20, size_t{64} << 20,
                                  size_t{1} << 30, size_t{1} << 40};

bool known(ReduceOp op) {
  for (ReduceOp o : kAllReduceOps)
    if (o == op) return true;
  return false;
}

void contribution(const uint8_t* data, size_t size, size_t chunk_bytes) {
  // The aggregator's receive buffer for a header.
  std::vector<char> header(sizeof(wire::ContributionHeader), 0);
  if (size > header.size()) return;  // truncated: the receive fails
  if (size > 0) std::memcpy(header.data(), data, size);
  wire::ContributionHeader h;
  const ErrorContext ctx{.rank = 0, .peer = 1, .op = "deadline allreduce", .seq = kStep};
  try {
    h = wire::check_contribution(header.data(), size, kStep, 1, ctx);
  } catch (const Error& e) {
    PLAIT_FUZZ_CHECK(e.category() == ErrorCategory::kInvalidUsage);
    return;
  }
  PLAIT_FUZZ_CHECK(h.magic == wire::kContributionMagic && h.step == kStep);
  // Aggregator::check_shape(), then handle()'s receives of the values, chunk by chunk.
  const size_t elem = dtype_size(static_cast<DataType>(h.dtype));
  PLAIT_FUZZ_CHECK(elem > 0);
  PLAIT_FUZZ_CHECK(known(static_cast<ReduceOp>(h.op)));
  const wire::Chunking k = wire::chunking(h.count, elem, chunk_bytes);
  PLAIT_FUZZ_CHECK(k.chunks >= 1);
  if (k.chunks > wire::kMaxChunks) return;  // check_shape() refuses it
  if (h.flags & wire::kNoValues) return;
  PLAIT_FUZZ_CHECK(h.count <= PTRDIFF_MAX / elem);
  const size_t values = h.count * elem;  // what slot.values is resized to
  size_t covered = 0;
  for (size_t c = 0; c < k.chunks; ++c) {
    PLAIT_FUZZ_CHECK(k.begin(c) <= k.end(c) && k.end(c) <= h.count);
    PLAIT_FUZZ_CHECK(k.begin(c) == covered);
    covered = k.end(c);
  }
  PLAIT_FUZZ_CHECK(covered == h.count && covered * elem == values);
}

void result(const uint8_t* data, size_t size, int ranks, size_t nchunks) {
  // The rank's receive buffer for the header.
  std::vector<char> in(wire::ResultHeader::bytes(ranks, nchunks), 0);
  if (size > in.size()) return;  // truncated: the receive fails
  if (size > 0) std::memcpy(in.data(), data, size);
  wire::ResultHeader h;
  if (!h.decode(in.data(), size, ranks, nchunks)) return;
  PLAIT_FUZZ_CHECK(size == in.size());  // a header cut short is not a header
  // What deadline_allreduce.cc reads: the masks, by rank and by chunk.
  const size_t words = wire::mask_words(ranks);
  PLAIT_FUZZ_CHECK(h.contributors.size() == words && h.slow.size() == words &&
                   h.present.size() == words);
  PLAIT_FUZZ_CHECK(h.chunks.size() == (nchunks > 1 ? nchunks * words : 0));
  const std::vector<int> contributors = wire::ranks_of(h.contributors, ranks);
  for (int r : contributors) PLAIT_FUZZ_CHECK(r >= 0 && r < ranks);
  (void)wire::ranks_of(h.slow, ranks);
  (void)wire::bit(h.present, ranks - 1);
  if (nchunks > 1)
    for (size_t c = 0; c < nchunks; ++c)
      for (int r = 0; r < ranks; ++r) (void)wire::bit(h.chunks, static_cast<int>(c * words * 64) + r);
  std::vector<char> again;
  h.encode(again, ranks);
  PLAIT_FUZZ_CHECK(again.size() == in.size() && std::memcmp(again.data(), in.data(), in.size()) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const bool is_result = data[0] & 1;
  const size_t chunk_bytes = kChunkBytes[(data[0] >> 1) & 7];
  const int ranks = data[1] + 1;
  const size_t nchunks = size_t{data[2]} + 1;
  data += 3;
  size -= 3;
  if (is_result) result(data, size, ranks, nchunks);
  else contribution(data, size, chunk_bytes);
  return 0;
}
