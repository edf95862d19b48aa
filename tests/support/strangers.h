// Strangers at a job's doors (tests): a party that connects to a listening port of a job and
// says nothing, sends garbage, forges or replays the job-token handshake, or, holding the
// token, sends a header with huge lengths. visit() tries each at one port and records what
// was not dropped.
#pragma once

#include <dirent.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/socket.h"
#include "plait/error.h"

namespace plait::testing::strangers {

using namespace std::chrono_literals;

inline net::Fd dial(int port) { return net::connect_tcp("127.0.0.1", port, Deadline::after(5s)); }

// The acceptor's hello (magic, version, nonce) and our proof, in the handshake's format.
using Message = std::array<uint8_t, 44>;

inline Message proof_for(const Message& hello, const std::string& label,
                         const std::string& token) {
  std::string message(reinterpret_cast<const char*>(hello.data() + 12), 32);
  message += label;
  Message proof = hello;  // same magic and version
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), proof.data() + 12,
       &len);
  return proof;
}

// Sends `proof` for whatever nonce comes; returns the verdict byte (1: accepted), or -1.
inline int answer(int fd, const std::function<Message(const Message&)>& make_proof) {
  try {
    Message hello;
    net::recv_all(fd, hello.data(), hello.size(), Deadline::after(10s));
    const Message proof = make_proof(hello);
    net::send_all(fd, proof.data(), proof.size(), Deadline::after(5s));
    uint8_t verdict = 0;
    net::recv_all(fd, &verdict, 1, Deadline::after(10s));
    return verdict;
  } catch (const Error&) {
    return -1;
  }
}

// True when the other side closes `fd` within a few seconds (reads EOF or an error).
inline bool dropped(int fd) {
  char buf[256];
  try {
    for (int i = 0; i < 64; ++i) net::recv_all(fd, buf, sizeof buf, Deadline::after(5s));
  } catch (const Error& e) {
    return e.category() != ErrorCategory::kTimeout;
  }
  return false;
}

inline int count_entries(const std::string& dir) {
  int n = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n;
}

// What one visit at a door found; every check must hold.
struct Visit {
  std::vector<std::string> failures;
  void expect(bool ok, const std::string& what) {
    if (!ok) failures.push_back(what);
  }
};

// The strangers' round at one listening port whose handshake label is `label`.
inline void visit(int port, const std::string& label, const std::string& token, Visit& v,
                  std::vector<net::Fd>& held) {
  const std::string at = label + " port " + std::to_string(port) + ": ";
  held.push_back(dial(port));  // says nothing, and stays
  {
    net::Fd fd = dial(port);
    std::vector<char> junk(65536);
    for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>(i * 131 + 7);
    try {
      net::send_all(fd.get(), junk.data(), junk.size(), Deadline::after(5s));
    } catch (const Error&) {
      // Refused mid-way is as good as refused.
    }
    v.expect(dropped(fd.get()), at + "garbage was not dropped");
  }
  {
    net::Fd fd = dial(port);
    v.expect(answer(fd.get(), [](const Message& hello) {
               Message forged = hello;
               for (size_t i = 12; i < forged.size(); ++i) forged[i] ^= 0x5a;
               return forged;
             }) == 0,
             at + "a wrong MAC was not refused");
  }
  Message recorded{};
  {
    net::Fd fd = dial(port);
    const int verdict = answer(fd.get(), [&](const Message& hello) {
      recorded = proof_for(hello, label, token);
      return recorded;
    });
    v.expect(verdict == 1, at + "the right token was not accepted");
    // Authenticated, then a header with a huge length: the store's frame length, or the
    // tcp provider's hello with a name of 4 GiB.
    std::array<uint8_t, 24> huge{};
    huge.fill(0xff);
    if (label == "plait tcp fabric") {
      const uint32_t magic = 0x46544c50;
      std::memcpy(huge.data(), &magic, 4);
      huge[4] = 3;  // the wire version (tcp/wire.h): the length, not the version, is refused
      huge[5] = 0;
    }
    try {
      net::send_all(fd.get(), huge.data(), huge.size(), Deadline::after(5s));
    } catch (const Error&) {
    }
    v.expect(dropped(fd.get()), at + "a huge length was not dropped");
  }
  {
    net::Fd fd = dial(port);
    v.expect(answer(fd.get(), [&](const Message&) { return recorded; }) == 0,
             at + "a replayed proof was not refused");
  }
}

}  // namespace plait::testing::strangers
