#include "transport/tcp/integrity.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstring>

#include "plait/error.h"

namespace plait::transport::tcp {
namespace {

[[noreturn]] void crypto_failed(const char* what) {
  throw Error(ErrorCategory::kSystem, std::string("tcp integrity: ") + what + " failed",
              {.op = "tcp integrity"});
}

StreamKey derive(const std::string& token, const std::array<uint8_t, 32>& nonce, char direction) {
  std::string message = "plait tcp integrity";
  message.append(reinterpret_cast<const char*>(nonce.data()), nonce.size());
  message.push_back(direction);
  uint8_t mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  static const uint8_t kEmpty = 0;
  const void* key = token.empty() ? static_cast<const void*>(&kEmpty) : token.data();
  if (!HMAC(EVP_sha256(), key, static_cast<int>(token.size()),
            reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len) ||
      len < 16)
    crypto_failed("HMAC-SHA256");
  StreamKey k;
  std::memcpy(k.data(), mac, k.size());
  return k;
}

}  // namespace

StreamKeys derive_stream_keys(const std::string& token, const std::array<uint8_t, 32>& nonce,
                              bool connector) {
  // 'C': what the connecting side sends, 'A': what the accepting side sends.
  const StreamKey from_connector = derive(token, nonce, 'C');
  const StreamKey from_acceptor = derive(token, nonce, 'A');
  return connector ? StreamKeys{from_connector, from_acceptor}
                   : StreamKeys{from_acceptor, from_connector};
}

FrameMac::FrameMac(const StreamKey& key) : ctx_(EVP_CIPHER_CTX_new()) {
  if (!ctx_ || EVP_EncryptInit_ex(ctx_, EVP_aes_128_gcm(), nullptr, key.data(), nullptr) != 1)
    crypto_failed("AES-128-GCM set-up");
}

FrameMac::~FrameMac() { EVP_CIPHER_CTX_free(ctx_); }

void FrameMac::begin() {
  uint8_t iv[12] = {};
  const uint64_t c = counter_++;
  std::memcpy(iv + 4, &c, sizeof c);
  if (EVP_EncryptInit_ex(ctx_, nullptr, nullptr, nullptr, iv) != 1) crypto_failed("GCM IV");
}

void FrameMac::update(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const int piece = static_cast<int>(std::min<size_t>(n, 1u << 30));
    int out = 0;
    if (EVP_EncryptUpdate(ctx_, nullptr, &out, p, piece) != 1) crypto_failed("GMAC update");
    p += piece;
    n -= static_cast<size_t>(piece);
  }
}

Tag FrameMac::finish() {
  int out = 0;
  unsigned char none[16];
  Tag t;
  if (EVP_EncryptFinal_ex(ctx_, none, &out) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, static_cast<int>(t.size()), t.data()) != 1)
    crypto_failed("GMAC tag");
  return t;
}

Tag FrameMac::tag(const void* data, size_t n) {
  begin();
  update(data, n);
  return finish();
}

}  // namespace plait::transport::tcp
