// The job-token handshake (core/auth.h) fed a hostile peer's bytes over a socket pair, on
// either side: the input's first byte picks the side (even: this process accepts, as the
// store server and the TCP provider do; odd: it connects), the rest is everything the peer
// sends before it closes. The peer's end stays open for reading, so our side's own messages
// go out; reads past the input hit EOF, so no input waits for the deadline.
//
// The acceptor's nonce is random, so no input proves the token to it (that is the point);
// the connector's side is deterministic and reaches "accepted".
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/auth.h"
#include "core/clock.h"
#include "fuzz_support.h"
#include "plait/error.h"

namespace {

// Hello, proof and verdict: 44 + 1 bytes are all a handshake reads; a little more shows
// that trailing bytes are left alone. Bounded so the input always fits the socket buffer.
constexpr size_t kMaxPeerBytes = 4096;
const std::string kToken = "fuzz-job-token";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size - 1 > kMaxPeerBytes) return 0;
  const bool connecting = data[0] & 1;
  auto pair = plait::fuzz::socket_pair();
  plait::fuzz::send_then_eof(pair.theirs.get(), data + 1, size - 1);
  // Never reached by a well-behaved input: EOF ends every read first.
  const auto deadline = plait::Deadline::after(std::chrono::seconds(10));
  try {
    if (connecting)
      plait::auth::connect_handshake(pair.ours.get(), kToken, "store", deadline);
    else
      plait::auth::accept_handshake(pair.ours.get(), kToken, "store", deadline);
  } catch (const plait::Error& e) {
    PLAIT_FUZZ_CHECK(e.category() != plait::ErrorCategory::kTimeout);
  }
  return 0;
}
