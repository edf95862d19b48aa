// Job-token handshake (see auth.h). Wire format, all integers big-endian:
//
//   acceptor  -> connector : hello  = magic[8] "plaitAUT" | version u16 | reserved u16 | nonce[32]
//   connector -> acceptor  : proof  = magic[8] "plaitAUT" | version u16 | reserved u16 | mac[32]
//   acceptor  -> connector : verdict u8 (1 accept, 0 token mismatch, 2 version mismatch)
//
// mac = HMAC-SHA256(key = token, message = nonce || label). The proof repeats the magic so an
// acceptor can tell "not a plait peer" from "wrong token"; a connector that sees an unknown
// version still sends a proof carrying its own version so the acceptor can say so too.
#include "core/auth.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <cstring>

#include "core/socket.h"
#include "plait/error.h"

namespace plait::auth {
namespace {

constexpr std::array<uint8_t, 8> kMagic = {'p', 'l', 'a', 'i', 't', 'A', 'U', 'T'};
constexpr uint16_t kVersion = 1;
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
constexpr size_t kMessageBytes = 8 + 2 + 2 + 32;  // hello and proof have the same shape

enum Verdict : uint8_t { kReject = 0, kAccept = 1, kVersionMismatch = 2 };

// Both hello and proof: magic, version, and a 32-byte payload (nonce or mac).
struct Message {
  std::array<uint8_t, kMessageBytes> bytes{};

  static Message make(const uint8_t* payload) {
    Message m;
    std::memcpy(m.bytes.data(), kMagic.data(), kMagic.size());
    m.bytes[8] = static_cast<uint8_t>(kVersion >> 8);
    m.bytes[9] = static_cast<uint8_t>(kVersion & 0xff);
    std::memcpy(m.bytes.data() + 12, payload, 32);
    return m;
  }
  bool magic_ok() const { return std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) == 0; }
  uint16_t version() const { return static_cast<uint16_t>(bytes[8] << 8 | bytes[9]); }
  const uint8_t* payload() const { return bytes.data() + 12; }
};

std::string openssl_error_text() {
  char buf[256] = "unknown OpenSSL error";
  unsigned long code = ERR_get_error();
  if (code != 0) ERR_error_string_n(code, buf, sizeof buf);
  return buf;
}

void random_bytes(uint8_t* out, size_t len) {
  if (RAND_bytes(out, static_cast<int>(len)) != 1) {
    throw Error(ErrorCategory::kSystem, "RAND_bytes failed: " + openssl_error_text(),
                {.op = "auth"});
  }
}

std::array<uint8_t, kMacBytes> proof_mac(const std::string& token, const uint8_t* nonce,
                                         std::string_view label) {
  std::string message(reinterpret_cast<const char*>(nonce), kNonceBytes);
  message.append(label);
  std::array<uint8_t, kMacBytes> mac{};
  unsigned int mac_len = 0;
  // A non-null key pointer even for the empty token: HMAC() treats a null key as "reuse".
  static const uint8_t kEmpty = 0;
  const void* key = token.empty() ? static_cast<const void*>(&kEmpty) : token.data();
  if (HMAC(EVP_sha256(), key, static_cast<int>(token.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac.data(),
           &mac_len) == nullptr ||
      mac_len != kMacBytes) {
    throw Error(ErrorCategory::kSystem, "HMAC-SHA256 failed: " + openssl_error_text(),
                {.op = "auth"});
  }
  return mac;
}

// Socket failures during the handshake keep their category but say where they happened.
template <typename Fn>
void io(Fn&& fn, std::string_view label, const std::string& peer, const char* step) {
  try {
    fn();
  } catch (const Error& e) {
    std::string where = std::string(label) + " handshake with " + peer;
    std::string message =
        e.category() == ErrorCategory::kTimeout
            ? "Timed out " + std::string(step) + " in the " + where + " (" + e.message() + ")"
            : where + " (" + step + "): " + e.message();
    throw Error(e.category(), message, {.op = "auth handshake"});
  }
}

std::string version_text(uint16_t v) { return "version " + std::to_string(v); }

}  // namespace

Nonce accept_handshake(int fd, const std::string& token, std::string_view label,
                       const Deadline& deadline) {
  const std::string peer = net::peer_address(fd);
  std::array<uint8_t, kNonceBytes> nonce{};
  random_bytes(nonce.data(), nonce.size());
  Message hello = Message::make(nonce.data());
  io([&] { net::send_all(fd, hello.bytes.data(), hello.bytes.size(), deadline); }, label, peer,
     "sending nonce");

  Message proof;
  io([&] { net::recv_all(fd, proof.bytes.data(), proof.bytes.size(), deadline); }, label, peer,
     "waiting for proof");
  if (!proof.magic_ok()) {
    throw invalid_usage(std::string(label) + ": the peer at " + peer +
                            " is not a plait process (bad handshake magic)",
                        {.op = "auth handshake"});
  }
  if (proof.version() != kVersion) {
    uint8_t verdict = kVersionMismatch;
    try {
      net::send_all(fd, &verdict, 1, deadline);
    } catch (const Error&) {
      // The peer may already have gone; the version error below is the one worth reporting.
    }
    throw invalid_usage(std::string(label) + ": the peer at " + peer + " speaks handshake " +
                            version_text(proof.version()) + ", this process " +
                            version_text(kVersion) + " (mixed plait versions in one job?)",
                        {.op = "auth handshake"});
  }

  std::array<uint8_t, kMacBytes> expected = proof_mac(token, nonce.data(), label);
  bool ok = CRYPTO_memcmp(expected.data(), proof.payload(), kMacBytes) == 0;
  uint8_t verdict = ok ? kAccept : kReject;
  io([&] { net::send_all(fd, &verdict, 1, deadline); }, label, peer, "sending verdict");
  if (!ok) {
    throw invalid_usage("job token mismatch on " + std::string(label) + " connection from " + peer +
                            ": the peer's PLAIT_JOB_TOKEN differs from this job's "
                            "(a process from another job?)",
                        {.op = "auth handshake"});
  }
  return nonce;
}

Nonce connect_handshake(int fd, const std::string& token, std::string_view label,
                        const Deadline& deadline) {
  const std::string peer = net::peer_address(fd);
  Message hello;
  io([&] { net::recv_all(fd, hello.bytes.data(), hello.bytes.size(), deadline); }, label, peer,
     "waiting for nonce");
  if (!hello.magic_ok()) {
    throw invalid_usage(
        std::string(label) + ": " + peer + " is not a plait endpoint (bad handshake magic)",
        {.op = "auth handshake"});
  }
  if (hello.version() != kVersion) {
    // Answer anyway, so the acceptor reports the version mismatch rather than a closed socket.
    std::array<uint8_t, kMacBytes> zero{};
    Message proof = Message::make(zero.data());
    try {
      net::send_all(fd, proof.bytes.data(), proof.bytes.size(), deadline);
    } catch (const Error&) {
    }
    throw invalid_usage(std::string(label) + " at " + peer + " speaks handshake " +
                            version_text(hello.version()) + ", this process " +
                            version_text(kVersion) + " (mixed plait versions in one job?)",
                        {.op = "auth handshake"});
  }

  std::array<uint8_t, kMacBytes> mac = proof_mac(token, hello.payload(), label);
  Message proof = Message::make(mac.data());
  io([&] { net::send_all(fd, proof.bytes.data(), proof.bytes.size(), deadline); }, label, peer,
     "sending proof");
  uint8_t verdict = kReject;
  io([&] { net::recv_all(fd, &verdict, 1, deadline); }, label, peer, "waiting for verdict");
  if (verdict == kAccept) {
    Nonce nonce;
    std::memcpy(nonce.data(), hello.payload(), nonce.size());
    return nonce;
  }
  if (verdict == kVersionMismatch) {
    throw invalid_usage(std::string(label) + " at " + peer +
                            " refused this process's handshake version (mixed plait versions?)",
                        {.op = "auth handshake"});
  }
  throw invalid_usage("job token rejected by " + std::string(label) + " at " + peer +
                          ": this process's PLAIT_JOB_TOKEN differs from the job's",
                      {.op = "auth handshake"});
}

std::string random_token() {
  std::array<uint8_t, 32> raw{};
  random_bytes(raw.data(), raw.size());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(raw.size() * 2);
  for (uint8_t b : raw) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0xf]);
  }
  return out;
}

}  // namespace plait::auth
