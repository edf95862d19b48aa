// Where an incoming payload goes. The stream's receive loop hands bytes to a Sink without
// knowing whose memory it is; the Sink applies the rule for that memory:
//
//   discard   read and thrown away (denied access, cancelled op, truncated message)
//   owned     memory the provider owns (an unexpected message's buffer)
//   buffer    a small buffer the Sink owns (a denial's reason text)
//   user      a local op's buffer: written only under the fabric's user-memory guard and only
//             while the op is not finished, so cancel() can promise "no byte after return"
//   region    registered memory: written only while pinned, so deregistration is safe
//
// A revoked destination turns the rest of the payload into "discard" (the stream stays in
// sync) and is remembered: revoked() lets the caller report it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <shared_mutex>
#include <vector>

#include "core/futex_shared_mutex.h"
#include "transport/memory_registry.h"
#include "transport/tcp/integrity.h"

namespace plait::transport::tcp {

class Sink {
 public:
  Sink() = default;
  static Sink discard(size_t length);
  static Sink owned(char* dest, size_t length);
  static Sink buffer(size_t length);
  static Sink user(char* dest, size_t length, std::shared_ptr<const std::atomic<bool>> finished,
                   FutexSharedMutex* guard);
  static Sink region(char* dest, size_t length, RegionRef region);

  size_t remaining() const { return length_ - done_; }
  // PLAIT_TCP_INTEGRITY: every byte taken is also fed to `mac` (the payload's tag).
  void set_mac(FrameMac* mac) { mac_ = mac; }
  bool revoked() const { return revoked_; }
  // The bytes of a buffer sink.
  const std::vector<char>& bytes() const { return buffer_; }

  // Takes n <= remaining() bytes already read from the socket.
  void put(const char* src, size_t n);
  // recv(2) of up to n bytes straight into the destination; `scratch` takes what is
  // discarded. Returns recv's result; *short_read says it got less than it asked for (the
  // socket had no more at that moment).
  ssize_t recv_from(int fd, size_t n, char* scratch, size_t scratch_size, bool* short_read);

 private:
  enum class Kind { kDiscard, kOwned, kBuffer, kUser, kRegion };
  // Runs io(dest) where the destination may be written right now, else io(nullptr).
  template <typename Io>
  auto with_destination(Io&& io);

  Kind kind_ = Kind::kDiscard;
  char* dest_ = nullptr;
  size_t length_ = 0;
  size_t done_ = 0;
  bool revoked_ = false;
  std::vector<char> buffer_;
  std::shared_ptr<const std::atomic<bool>> finished_;
  FutexSharedMutex* guard_ = nullptr;
  RegionRef region_;
  FrameMac* mac_ = nullptr;
};

}  // namespace plait::transport::tcp
