// The TCP provider's receiving side over two streams (the harness is tcp_harness.h), where a
// rendezvous message's stripes alternate and one stream may be lost while the other lives
// on (transport/tcp/stream_loss.cc). The input: u16 n (little-endian), then n bytes rank 1
// sends on stream 0 (every header but kData's), then what it sends on stream 1.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tcp_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t first = std::min<size_t>(data[0] | size_t(data[1]) << 8, size - 2);
  const uint8_t* rest = data + 2;
  plait::fuzz::run_tcp_fabric({std::vector<uint8_t>(rest, rest + first),
                               std::vector<uint8_t>(rest + first, data + size)});
  return 0;
}
