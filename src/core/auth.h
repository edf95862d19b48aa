// Job-token authentication for every plait connection (store and transport). The token is
// never sent: the accepting side sends a random nonce, the connecting side answers with
// HMAC-SHA256(token, nonce || label), the acceptor checks it in constant time and answers
// accept or reject. A wrong token fails both sides with a clear error, before any other byte.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/clock.h"

namespace plait::auth {

// The connection's nonce: fresh per connection, known to both sides once the handshake
// succeeded (per-connection keys derive from it and the token).
using Nonce = std::array<uint8_t, 32>;

// The acceptor's side, on a freshly accepted blocking socket. Throws plait::Error
// (kInvalidUsage "job token mismatch" naming `label` and the peer address) on a bad proof,
// kTimeout / kRemote on a stalled or closed connection.
Nonce accept_handshake(int fd, const std::string& token, std::string_view label,
                       const Deadline& deadline);

// The connector's side. Throws plait::Error(kInvalidUsage) "job token rejected by <label>"
// when the acceptor refuses the proof.
Nonce connect_handshake(int fd, const std::string& token, std::string_view label,
                        const Deadline& deadline);

// A fresh random token (hex), for launchers.
std::string random_token();

}  // namespace plait::auth
