// The UCX provider's active-message headers (transport/ucx/wire.h), checked the way each
// handler checks them (worker.cc's hello, two_sided.cc's on_message, progress.cc's
// on_goodbye, rma.cc's and remote_keys.cc's key and immediate handlers) by the pure functions
// they call: read_header(), source_rank(), hello_matches(), goodbye_source(), bounded_text().
// UCX itself is not involved (it hands the handler a header and data as they came). The
// input, for a fabric of rank 0 of 4:
//
//   u8  the active message's id (kAmHello .. kAmKeyRevoked; others have no handler)
//   u8  the header's length
//   ... the header (as many bytes as there are, up to that length)
//   rest  the message's data
//
// Beyond "no crash": a header is taken only at its exact size, a sender only when it is one
// of the job's ranks and not this one, a hello only from a job of this size and wire
// version, and a denial's or goodbye's text is bounded.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "fuzz_support.h"
#include "transport/ucx/wire.h"

using namespace plait::transport::ucx;

namespace {

constexpr int kSize = 4, kRank = 0;

void check_source(int32_t source) {
  const int s = source_rank(source, kSize, kRank);
  PLAIT_FUZZ_CHECK(s == -1 || (s == source && s >= 0 && s < kSize && s != kRank));
  PLAIT_FUZZ_CHECK(s != -1 || source < 0 || source >= kSize || source == kRank);
}

template <typename T>
bool header_of(const uint8_t* header, size_t header_bytes, T* out) {
  const bool ok = read_header(header, header_bytes, out);
  PLAIT_FUZZ_CHECK(ok == (header_bytes == sizeof(T)));
  if (ok) {
    PLAIT_FUZZ_CHECK(std::memcmp(out, header, sizeof(T)) == 0);
    check_source(out->source);
  }
  return ok;
}

void check_text(const uint8_t* data, size_t length) {
  const std::string_view text = bounded_text(data, length);
  PLAIT_FUZZ_CHECK(text.size() <= kMaxDenialBytes && text.size() <= length);
  PLAIT_FUZZ_CHECK(text.size() == length || text.size() == kMaxDenialBytes);
  PLAIT_FUZZ_CHECK(text.empty() || text.data() == reinterpret_cast<const char*>(data));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const unsigned id = data[0];
  const size_t header_bytes = std::min<size_t>(data[1], size - 2);
  const uint8_t* header = data + 2;
  const uint8_t* body = header + header_bytes;
  const size_t length = size - 2 - header_bytes;
  switch (id) {
    case kAmHello: {
      HelloHeader h;
      if (header_of(header, header_bytes, &h) && hello_matches(h, kSize))
        PLAIT_FUZZ_CHECK(h.magic == kHelloMagic && h.version == kWireVersion && h.size == kSize);
      break;
    }
    case kAmMessage: {
      MessageHeader h;
      header_of(header, header_bytes, &h);
      break;
    }
    case kAmImm: {
      ImmHeader h;
      header_of(header, header_bytes, &h);
      break;
    }
    case kAmImmDone: {
      ImmDone d;
      header_of(header, header_bytes, &d);
      break;
    }
    case kAmGoodbye: {
      const int32_t source = goodbye_source(header, header_bytes);
      PLAIT_FUZZ_CHECK(header_bytes == sizeof source || source == -1);
      check_source(source);
      check_text(body, length);
      break;
    }
    case kAmKeyRequest: {
      KeyRequest q;
      header_of(header, header_bytes, &q);
      break;
    }
    case kAmKeyReply: {
      KeyReply k;
      if (header_of(header, header_bytes, &k) && k.denied) check_text(body, length);
      break;
    }
    case kAmKeyRevoke:
    case kAmKeyRevoked: {
      KeyRevoke k;
      header_of(header, header_bytes, &k);
      break;
    }
    default:
      break;  // no handler: UCX drops it
  }
  return 0;
}
