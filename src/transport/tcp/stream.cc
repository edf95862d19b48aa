#include "transport/tcp/stream.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace plait::transport::tcp {
namespace {

// Small enough that a header read pulls at most a few KiB of a large payload through this
// buffer (the rest is received straight into its destination), large enough to take many
// small messages in one recv.
constexpr size_t kRxBufferBytes = 16 * 1024;
// A payload at least this large is received straight into its destination.
constexpr size_t kDirectBytes = 4 * 1024;
constexpr int kMaxIov = 64;
constexpr size_t kMaxWriteBytes = 8u << 20;

// Stands in for the rest of a payload whose source was revoked after its first bytes went
// out (a cancelled send, a deregistered region): the stream must stay in sync.
constexpr size_t kZeroBytes = 64 * 1024;
const char kZeros[kZeroBytes] = {};

bool would_block(int err) { return err == EAGAIN || err == EWOULDBLOCK; }

}  // namespace

Stream::Stream(net::Fd fd, int peer, int index, FutexSharedMutex* user_memory_guard)
    : fd_(std::move(fd)), peer_(peer), index_(index), user_memory_guard_(user_memory_guard),
      rx_(kRxBufferBytes) {}

int Stream::submit(Frame frame, FinishedOps* finished) {
  std::lock_guard lock(mu_);
  // Closed on purpose (peer failed or said goodbye): the frame's op fails with the peer.
  if (!sending_) return 0;
  queue_.push_back(std::move(frame));
  // A non-empty queue means a write is already pending on EPOLLOUT; keep the order.
  if (queue_.size() > 1) return 0;
  return flush_locked(finished);
}

Stream::DirectWrite Stream::write_now(const WireHeader& header, const char* payload,
                                      int* error) {
  std::lock_guard lock(mu_);
  if (!sending_ || !queue_.empty()) return DirectWrite::kNotNow;
  iovec iov[2] = {{const_cast<WireHeader*>(&header), sizeof(WireHeader)},
                  {const_cast<char*>(payload), header.length}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = header.length > 0 ? 2 : 1;
  ssize_t n;
  do {
    n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && !would_block(errno)) {
    *error = errno;
    sending_ = false;
    send_error_ = errno;
    return DirectWrite::kNotNow;
  }
  const size_t written = n < 0 ? 0 : static_cast<size_t>(n);
  if (written == sizeof(WireHeader) + header.length) return DirectWrite::kWritten;
  // A full socket (EPOLLOUT continues it): the rest goes out of a copy, frame-ordered.
  Frame f;
  f.header = header;
  f.owned.assign(payload, header.length);
  f.sent = written;
  queue_.push_back(std::move(f));
  return DirectWrite::kCopied;
}

int Stream::flush(FinishedOps* finished) {
  std::lock_guard lock(mu_);
  return flush_locked(finished);
}

void Stream::close_sending(bool shut_write) {
  std::lock_guard lock(mu_);
  sending_ = false;
  queue_.clear();
  if (shut_write) ::shutdown(fd_.get(), SHUT_WR);
}

bool Stream::idle() {
  std::lock_guard lock(mu_);
  return queue_.empty();
}

int Stream::send_error() {
  std::lock_guard lock(mu_);
  return send_error_;
}

void Stream::keep_started_frame_locked() {
  if (queue_.empty()) return;
  Frame& f = queue_.front();  // only the front frame can be partly written
  if (f.sent == 0 || !f.op || !f.op->done()) return;
  if (f.owned.empty() && f.payload && f.header.length > 0)
    f.owned.assign(f.payload, f.header.length);
  f.payload = nullptr;
  f.op = nullptr;
  f.counts_for_op = false;
}

int Stream::flush_locked(FinishedOps* finished) {
  while (sending_ && !queue_.empty()) {
    iovec iov[kMaxIov];
    int iovcnt = 0;
    size_t planned = 0;
    // Held across the writev: the user-memory guard (once) and at most one region pin, so
    // that cancel() and deregistration wait for this write and not longer.
    std::shared_lock<FutexSharedMutex> user_lock(*user_memory_guard_, std::defer_lock);
    RegisteredMemory::Pin pin;
    const RegisteredMemory* pinned = nullptr;
    size_t i = 0;
    while (i < queue_.size() && iovcnt + 2 <= kMaxIov && planned < kMaxWriteBytes) {
      Frame& f = queue_[i];
      bool readable = true;
      if (f.op) {
        if (!user_lock.owns_lock()) user_lock.lock();
        readable = !f.op->done();
      }
      if (f.region) {
        if (pinned && pinned != f.region.get()) break;
        if (!pinned) {
          pin = f.region->pin();
          pinned = f.region.get();
        }
        if (!pin && f.sent == 0 && !f.if_revoked.empty()) {
          f.header.flags |= kFlagDenied;
          f.owned = std::move(f.if_revoked);
          f.header.length = f.owned.size();
          f.payload = nullptr;
          f.region = nullptr;
        } else {
          readable = readable && static_cast<bool>(pin);
        }
      }
      if (!readable && f.sent == 0) {
        // Nothing of it is on the wire: drop it, but only from the front, so that the iovecs
        // gathered so far keep pointing at live frames.
        if (i > 0) break;
        queue_.pop_front();
        continue;
      }
      constexpr size_t kHeader = sizeof(WireHeader);
      if (f.sent < kHeader) {
        iov[iovcnt++] = {reinterpret_cast<char*>(&f.header) + f.sent, kHeader - f.sent};
        planned += kHeader - f.sent;
      }
      size_t offset = std::max(f.sent, kHeader) - kHeader;
      size_t left = f.header.length - offset;
      if (left > 0) {
        if (readable) {
          iov[iovcnt++] = {const_cast<char*>(f.source()) + offset, left};
        } else {
          left = std::min(left, kZeroBytes);
          iov[iovcnt++] = {const_cast<char*>(kZeros), left};
        }
        planned += left;
      }
      if (!readable) break;  // padding goes out one piece at a time
      ++i;
    }
    if (iovcnt == 0) continue;  // dropped frames only; look again

    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(iovcnt);
    ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    int err = errno;
    pin = RegisteredMemory::Pin();
    if (user_lock.owns_lock()) user_lock.unlock();
    if (n < 0) {
      if (err == EINTR) continue;
      if (would_block(err)) return 0;
      sending_ = false;
      send_error_ = err;
      queue_.clear();
      return err;
    }
    auto written = static_cast<size_t>(n);
    while (written > 0) {
      Frame& f = queue_.front();
      size_t take = std::min(written, f.size() - f.sent);
      f.sent += take;
      written -= take;
      if (f.sent == f.size()) {
        if (f.counts_for_op && f.op->parts_left.fetch_sub(1) == 1 && f.op->claim())
          finished->push_back(std::move(f.op));
        queue_.pop_front();
      }
    }
  }
  return 0;
}

void Stream::compact() {
  if (rx_begin_ == 0) return;
  std::memmove(rx_.data(), rx_.data() + rx_begin_, rx_end_ - rx_begin_);
  rx_end_ -= rx_begin_;
  rx_begin_ = 0;
}

Stream::ReadResult Stream::read_into_buffer(size_t* consumed, int* error) {
  if (rx_empty_) return ReadResult::kDrained;
  compact();
  for (;;) {
    const size_t room = rx_.size() - rx_end_;
    ssize_t n = ::recv(fd_.get(), rx_.data() + rx_end_, room, 0);
    if (n > 0) {
      rx_empty_ = static_cast<size_t>(n) < room && !hangup_seen;
      rx_end_ += static_cast<size_t>(n);
      *consumed += static_cast<size_t>(n);
      return ReadResult::kMore;
    }
    if (n == 0) return ReadResult::kClosed;
    if (errno == EINTR) continue;
    if (would_block(errno)) return ReadResult::kDrained;
    *error = errno;
    return ReadResult::kError;
  }
}

Stream::ReadResult Stream::receive(StreamHandler& handler, size_t budget, int* error) {
  size_t consumed = 0;
  // Called on a new edge (or to continue past the read budget): the socket may have more.
  rx_empty_ = false;
  for (;;) {
    if (goodbye_received_) return ReadResult::kClosed;
    if (!in_payload_) {
      if (rx_end_ - rx_begin_ < sizeof(WireHeader)) {
        if (consumed >= budget) return ReadResult::kMore;
        ReadResult r = read_into_buffer(&consumed, error);
        if (r != ReadResult::kMore) return r;
        continue;
      }
      std::memcpy(&rx_header_, rx_.data() + rx_begin_, sizeof(WireHeader));
      rx_begin_ += sizeof(WireHeader);
      incoming_ = handler.on_header(*this, rx_header_);
      in_payload_ = true;
    }
    Sink& sink = incoming_.sink;
    size_t buffered = std::min(rx_end_ - rx_begin_, sink.remaining());
    if (buffered > 0) {
      sink.put(rx_.data() + rx_begin_, buffered);
      rx_begin_ += buffered;
    }
    if (sink.remaining() > 0) {
      // The buffer is empty here: everything buffered went into the sink.
      if (consumed >= budget) return ReadResult::kMore;
      if (sink.remaining() >= kDirectBytes) {
        if (rx_empty_) return ReadResult::kDrained;
        rx_begin_ = rx_end_ = 0;
        ssize_t n =
            sink.recv_from(fd_.get(), sink.remaining(), rx_.data(), rx_.size(), &rx_empty_);
        if (hangup_seen) rx_empty_ = false;
        if (n > 0) {
          consumed += static_cast<size_t>(n);
          continue;
        }
        if (n == 0) return ReadResult::kClosed;
        if (errno == EINTR) continue;
        if (would_block(errno)) return ReadResult::kDrained;
        *error = errno;
        return ReadResult::kError;
      }
      ReadResult r = read_into_buffer(&consumed, error);
      if (r != ReadResult::kMore) return r;
      continue;
    }
    in_payload_ = false;
    Incoming done = std::move(incoming_);
    incoming_ = Incoming();
    handler.on_payload(*this, rx_header_, done);
  }
}

Stream::ReadResult Stream::drain(int* error) {
  for (;;) {
    ssize_t n = ::recv(fd_.get(), rx_.data(), rx_.size(), 0);
    if (n > 0) continue;
    if (n == 0) return ReadResult::kClosed;
    if (errno == EINTR) continue;
    if (would_block(errno)) return ReadResult::kDrained;
    *error = errno;
    return ReadResult::kError;
  }
}

}  // namespace plait::transport::tcp
