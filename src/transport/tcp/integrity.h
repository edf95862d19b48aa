// PLAIT_TCP_INTEGRITY=1: every frame on a tcp stream is authenticated, so that a flipped bit
// on the wire (or a forged, replayed or reordered frame) is an error naming the peer, never
// a wrong result.
//
// With it a frame is  header (56) | header tag (16) | payload | payload tag (16, if any).
// Each tag is AES-128-GMAC (GCM with the bytes as additional data, nothing encrypted) under a
// key of this stream and direction, with the IV a counter both sides advance per tag: a
// frame out of order, dropped or replayed fails the next check. The header has its own tag
// so that it is trusted before it steers anything (which buffer, how many bytes); the
// payload's is checked before its operation may complete.
//
// Keys: HMAC-SHA256(job token, label | the connection's handshake nonce | direction),
// cut to 16 bytes. The nonce is fresh per socket, so no two streams or jobs share a key.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;

namespace plait::transport::tcp {

inline constexpr size_t kTagBytes = 16;
using Tag = std::array<uint8_t, kTagBytes>;
using StreamKey = std::array<uint8_t, 16>;

struct StreamKeys {
  StreamKey send{};
  StreamKey recv{};
};

// `connector`: this side connected the socket (the other accepted it).
StreamKeys derive_stream_keys(const std::string& token, const std::array<uint8_t, 32>& nonce,
                              bool connector);

// One direction of one stream: tags in sequence.
class FrameMac {
 public:
  explicit FrameMac(const StreamKey& key);
  ~FrameMac();
  FrameMac(const FrameMac&) = delete;
  FrameMac& operator=(const FrameMac&) = delete;

  // A tag over `n` bytes at once (the next IV).
  Tag tag(const void* data, size_t n);
  // The same in pieces: begin(), update()..., finish().
  void begin();
  void update(const void* data, size_t n);
  Tag finish();

  // The counter, for a sender that must take back tags of frames it did not send.
  uint64_t counter() const { return counter_; }
  void rewind(uint64_t counter) { counter_ = counter; }

 private:
  EVP_CIPHER_CTX* ctx_ = nullptr;
  uint64_t counter_ = 0;
};

}  // namespace plait::transport::tcp
