// The TCP provider's receiving side over one stream (the harness is tcp_harness.h): the
// input is everything rank 1 sends before it closes.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tcp_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  plait::fuzz::run_tcp_fabric({std::vector<uint8_t>(data, data + size)});
  return 0;
}
