// Checks of the hello each side of a TCP provider socket sends after the job-token handshake
// (layout in wire.h). Pure functions of the peer's bytes, so that connection setup
// (connect.cc) and the fuzz target (fuzz/tcp_hello_fuzz.cc) run the same checks.
#pragma once

#include <cstddef>
#include <string_view>

#include "transport/fabric.h"
#include "transport/tcp/wire.h"

namespace plait::transport::tcp {

// A fabric name longer than this is refused before anything is allocated for it.
inline constexpr size_t kMaxHelloNameBytes = 4096;

// Checks the fixed part (magic, version, name length); returns how many name bytes follow.
// Throws plait::Error(kInvalidUsage).
size_t hello_name_length(const Hello& h);

// Checks the whole hello against this fabric: the same name, size and stream count, and a
// rank and stream in range. Throws plait::Error(kInvalidUsage) saying which.
void check_hello(const Hello& h, std::string_view name, const FabricOptions& o);

}  // namespace plait::transport::tcp
