#include "transport/tcp/sink.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <mutex>

namespace plait::transport::tcp {

Sink Sink::discard(size_t length) {
  Sink s;
  s.length_ = length;
  return s;
}

Sink Sink::owned(char* dest, size_t length) {
  Sink s;
  s.kind_ = Kind::kOwned;
  s.dest_ = dest;
  s.length_ = length;
  return s;
}

Sink Sink::buffer(size_t length) {
  Sink s;
  s.kind_ = Kind::kBuffer;
  s.buffer_.resize(length);
  s.dest_ = nullptr;  // buffer_.data() is used directly: moving a Sink moves the vector
  s.length_ = length;
  return s;
}

Sink Sink::user(char* dest, size_t length, std::shared_ptr<const std::atomic<bool>> finished,
                FutexSharedMutex* guard) {
  Sink s;
  s.kind_ = Kind::kUser;
  s.dest_ = dest;
  s.length_ = length;
  s.finished_ = std::move(finished);
  s.guard_ = guard;
  return s;
}

Sink Sink::region(char* dest, size_t length, RegionRef region) {
  Sink s;
  s.kind_ = Kind::kRegion;
  s.dest_ = dest;
  s.length_ = length;
  s.region_ = std::move(region);
  return s;
}

template <typename Io>
auto Sink::with_destination(Io&& io) {
  switch (kind_) {
    case Kind::kDiscard:
      return io(nullptr);
    case Kind::kOwned:
      return io(dest_ + done_);
    case Kind::kBuffer:
      return io(buffer_.data() + done_);
    case Kind::kUser: {
      // The lock spans the access itself: cancel() takes it exclusively after marking ops
      // finished, so once it returns no access to a finished op's memory is in flight.
      std::shared_lock lock(*guard_);
      if (!finished_->load(std::memory_order_acquire)) return io(dest_ + done_);
      break;
    }
    case Kind::kRegion: {
      auto pin = region_->pin();
      if (pin) return io(dest_ + done_);
      break;
    }
  }
  revoked_ = true;
  return io(nullptr);
}

void Sink::put(const char* src, size_t n) {
  if (mac_) mac_->update(src, n);
  with_destination([&](char* dest) {
    if (dest) std::memcpy(dest, src, n);
    return 0;
  });
  done_ += n;
}

ssize_t Sink::recv_from(int fd, size_t n, char* scratch, size_t scratch_size, bool* short_read) {
  n = std::min(n, remaining());
  size_t asked = 0;
  ssize_t got = with_destination([&](char* dest) {
    asked = dest ? n : std::min(n, scratch_size);
    char* into = dest ? dest : scratch;
    ssize_t got = ::recv(fd, into, asked, 0);
    // Read back while the destination is still ours (the same guard or pin as the write).
    if (mac_ && got > 0) mac_->update(into, static_cast<size_t>(got));
    return got;
  });
  if (got > 0) done_ += static_cast<size_t>(got);
  *short_read = got > 0 && static_cast<size_t>(got) < asked;
  return got;
}

}  // namespace plait::transport::tcp
