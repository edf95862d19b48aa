// The embedded store client's side of its protocol (bootstrap/store_protocol.h): a reply body
// as the client's exchange() hands it over (a frame's length already checked), decoded by
// decode_reply(), the client's own decoder. The input's first byte picks the request the
// reply answers, the rest is the body.
#include <cstddef>
#include <cstdint>

#include "bootstrap/store_protocol.h"
#include "fuzz_support.h"
#include "plait/error.h"

using namespace plait::store_wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const auto op = static_cast<Op>(data[0] % 5 + 1);
  const uint8_t* body = data + 1;
  const size_t len = size - 1;
  // exchange() refuses these before decoding.
  if (len == 0 || len > kMaxFrameBytes) return 0;
  try {
    const Reply reply = decode_reply(op, body, len);
    PLAIT_FUZZ_CHECK(reply.status == Status::kOk || reply.status == Status::kTimeout ||
                     reply.status == Status::kError);
    // Every key and value came out of the body: their bytes cannot exceed it.
    size_t bytes = reply.value.size() + reply.error.size();
    for (const auto& k : reply.missing_keys) bytes += k.size();
    PLAIT_FUZZ_CHECK(bytes <= len);
  } catch (const plait::Error& e) {
    PLAIT_FUZZ_CHECK(e.category() == plait::ErrorCategory::kInvalidUsage);
  }
  return 0;
}
