// The stall inspector's per-rank line (coll/stall/stall_report.h), which every rank reads
// from the store for each of its peers when a collective stalls: decode_state(), then the
// summary every rank logs from what it decoded. The input is the line.
//
// Beyond "no crash": a state that decodes names an op, dtype and reduction that exist and a
// root of -1 or more, and encode_state() writes it back as a line that decodes to the same
// state (the waited time to the millisecond; only below 2^53 ms, where a double holds it
// exactly: the inspector encodes its own clock, never a peer's number).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "coll/stall/stall_report.h"
#include "fuzz_support.h"

using namespace plait;
using namespace plait::coll;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  const std::optional<RankState> s = decode_state(line);
  if (!s) return 0;
  PLAIT_FUZZ_CHECK(s->answered);
  PLAIT_FUZZ_CHECK(s->current.op <= CollOp::kBarrier);
  PLAIT_FUZZ_CHECK(dtype_size(s->current.dtype) > 0);
  PLAIT_FUZZ_CHECK(s->current.redop <= ReduceOp::kAvg);
  PLAIT_FUZZ_CHECK(s->current.root >= -1);
  PLAIT_FUZZ_CHECK(s->waited_s >= 0);

  // What every rank logs: this rank's state among others (in the same collective, behind
  // it, silent).
  RankState peer = *s;
  peer.current.seq += 1;
  std::vector<RankState> states{*s, peer, RankState{}, *s};
  states[3].in_collective = !s->in_collective;
  PLAIT_FUZZ_CHECK(!stall_summary(states).empty());
  PLAIT_FUZZ_CHECK(!s->current.describe().empty());

  if (s->waited_s * 1000 >= 0x1p53) return 0;
  const std::optional<RankState> again = decode_state(encode_state(*s));
  PLAIT_FUZZ_CHECK(again);
  PLAIT_FUZZ_CHECK(again->in_collective == s->in_collective && again->started == s->started);
  PLAIT_FUZZ_CHECK(again->current.seq == s->current.seq && again->current.op == s->current.op &&
                   again->current.dtype == s->current.dtype &&
                   again->current.redop == s->current.redop &&
                   again->current.root == s->current.root &&
                   again->current.count == s->current.count);
  PLAIT_FUZZ_CHECK(std::fabs(again->waited_s - s->waited_s) <= 0.0011);
  return 0;
}
