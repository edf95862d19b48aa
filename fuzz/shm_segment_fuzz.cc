// The header of a peer's shm segment (transport/shm/layout.h), checked once at setup by
// check_peer_segment() (transport/shm/peer_header.h): the only geometry this rank ever takes
// from memory a peer writes. The input is the peer's segment:
//
//   u8  flags   bit 0: the harness writes the job's token tag into the header (an input
//               cannot forge the HMAC, and without it every input stops at the tag check)
//   u16 mapped  the segment's size, in 4 KiB pages (what fstat would report)
//   rest        the segment's first bytes; the remainder is zero
//
// Beyond "no crash": an accepted geometry fits the mapping, and every ring, peer entry and
// table slot it names can be touched (AddressSanitizer catches any that lies outside).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "fuzz_support.h"
#include "plait/error.h"
#include "transport/shm/peer_header.h"
#include "transport/shm/segment.h"

using namespace plait::transport::shm;

namespace {

constexpr int kSize = 4, kPeer = 1, kOurRank = 0;
const std::string kSegmentName = "/plait-fuzz-1";
// Bounds the harness's allocation, not the parser: a real segment may be larger.
constexpr size_t kMaxMappedPages = 1024;  // 4 MiB

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tag = segment_tag("fuzz-job-token", "fuzz", kPeer, kSegmentName);
  if (size < 3) return 0;
  const bool write_tag = data[0] & 1;
  const size_t pages = (size_t(data[1]) | size_t(data[2]) << 8) % kMaxMappedPages + 1;
  const size_t mapped = pages * 4096;
  data += 3;
  size -= 3;

  std::unique_ptr<char, FreeDeleter> base(static_cast<char*>(std::aligned_alloc(4096, mapped)));
  std::memset(base.get(), 0, mapped);
  std::memcpy(base.get(), data, std::min(size, mapped));
  if (write_tag)
    std::memcpy(reinterpret_cast<SegmentHeader*>(base.get())->tag, tag.data(), tag.size());

  CheckedPeer c;
  try {
    c = check_peer_segment(base.get(), mapped, tag, kPeer, kSize, kOurRank, "the fuzzed segment");
  } catch (const plait::Error& e) {
    PLAIT_FUZZ_CHECK(e.category() == plait::ErrorCategory::kInvalidUsage ||
                     e.category() == plait::ErrorCategory::kRemote);
    return 0;
  }
  const Geometry& g = c.geometry;
  PLAIT_FUZZ_CHECK(g.total_bytes <= mapped);
  PLAIT_FUZZ_CHECK(c.my_index < g.peer_count);
  const SegmentView view(base.get(), g);
  PLAIT_FUZZ_CHECK(view.peer_ranks()[c.my_index] == kOurRank);
  // What the fabric then touches: our ring and its last byte, our CMA word, every slot's
  // fields and our pin counter in it.
  volatile char sink = view.ring_data(c.my_index)[g.ring_capacity - 1];
  sink = static_cast<char>(view.ring_control(c.my_index)->tail.load());
  sink = static_cast<char>(view.cma_state(c.my_index).load());
  for (uint64_t s = 0; s < g.table_slots; ++s)
    sink = static_cast<char>(view.slot(s).access.load() + view.pins(s, c.my_index).load());
  (void)sink;
  return 0;
}
