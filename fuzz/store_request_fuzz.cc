// The embedded store server's side of its protocol (bootstrap/store_protocol.h): the input is
// what a client sends once authenticated, cut into frames the way TcpStoreServer::Impl::serve()
// cuts its buffer, each body decoded by decode_request(), the server's own decoder.
//
// Beyond "no crash": a body that decodes must be the one canonical encoding of the request it
// decodes to (the client's Writer gives those bytes back), i.e. the decoder ignores nothing.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "bootstrap/store_protocol.h"
#include "fuzz_support.h"
#include "plait/error.h"

namespace {

using namespace plait::store_wire;

plait::Bytes encode(const Request& q) {
  Writer w;
  w.u8(uint8_t(q.op));
  switch (q.op) {
    case Op::kSet: w.str(q.key).bytes(q.value); break;
    case Op::kGet: w.u64(q.timeout_ms).str(q.key); break;
    case Op::kAdd: w.str(q.key).i64(q.delta); break;
    case Op::kWait: write_strings(w.u64(q.timeout_ms), q.keys); break;
    case Op::kCheck: w.str(q.key); break;
  }
  return w.finish();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t off = 0;
  while (size - off >= kFrameHeaderBytes) {
    const uint32_t len = read_frame_length(data + off);
    // The server refuses such a frame before buffering its body, and closes.
    if (len > kMaxFrameBytes) break;
    // The server waits for the rest of the frame; here no more comes.
    if (size - off - kFrameHeaderBytes < len) break;
    const uint8_t* body = data + off + kFrameHeaderBytes;
    off += kFrameHeaderBytes + len;
    Request q;
    try {
      q = decode_request(body, len);
    } catch (const plait::Error& e) {
      PLAIT_FUZZ_CHECK(e.category() == plait::ErrorCategory::kInvalidUsage);
      break;  // the server drops the connection
    }
    // What ADD does with a stored value (SET may have stored any bytes).
    if (q.op == Op::kSet) (void)parse_decimal(q.value);
    const plait::Bytes again = encode(q);
    PLAIT_FUZZ_CHECK(again.size() == kFrameHeaderBytes + len);
    PLAIT_FUZZ_CHECK(std::memcmp(again.data() + kFrameHeaderBytes, body, len) == 0);
  }
  return 0;
}
