// The hello a TCP provider socket carries after the job-token handshake (transport/tcp/wire.h,
// checks in transport/tcp/hello.h): the input is the peer's hello and what follows it, read
// the way connect.cc's recv_hello() reads it, checked against a fabric of rank 0 of 4 with
// 2 streams named "fuzz".
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "fuzz_support.h"
#include "plait/error.h"
#include "transport/tcp/hello.h"
#include "transport/tcp/tcp_settings.h"

using namespace plait::transport;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const FabricOptions options = [] {
    FabricOptions o;
    o.rank = 0;
    o.size = 4;
    o.name = "fuzz";
    o.config.get<plait::transport::TcpSettings>().streams = 2;
    return o;
  }();
  tcp::Hello h;
  if (size < sizeof h) return 0;  // recv_hello() fails on the closed socket
  std::memcpy(&h, data, sizeof h);
  try {
    const size_t name_length = tcp::hello_name_length(h);
    PLAIT_FUZZ_CHECK(name_length <= tcp::kMaxHelloNameBytes);
    if (size - sizeof h < name_length) return 0;  // as above
    const std::string_view name(reinterpret_cast<const char*>(data + sizeof h), name_length);
    tcp::check_hello(h, name, options);
    // What connect.cc then indexes with: mesh.sockets[rank][stream].
    PLAIT_FUZZ_CHECK(h.rank >= 0 && h.rank < options.size);
    PLAIT_FUZZ_CHECK(h.stream < static_cast<uint32_t>(options.config.get<plait::transport::TcpSettings>().streams));
  } catch (const plait::Error& e) {
    PLAIT_FUZZ_CHECK(e.category() == plait::ErrorCategory::kInvalidUsage);
  }
  return 0;
}
