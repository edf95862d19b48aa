#include "transport/tcp/stream.h"

#include <openssl/crypto.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "plait/error.h"

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

Stream::Stream(net::Fd fd, int peer, int index, FutexSharedMutex* user_memory_guard,
               const StreamKeys* keys)
    : fd_(std::move(fd)), peer_(peer), index_(index), user_memory_guard_(user_memory_guard),
      rx_(kRxBufferBytes) {
  if (keys) {
    tx_mac_ = std::make_unique<FrameMac>(keys->send);
    rx_mac_ = std::make_unique<FrameMac>(keys->recv);
  }
}

void Stream::tag_locked(Frame& f) {
  if (!tx_mac_ || f.tagged) return;
  f.tag_counter = tx_mac_->counter();
  f.header_tag = tx_mac_->tag(&f.header, sizeof(WireHeader));
  if (f.header.length > 0) f.payload_tag = tx_mac_->tag(f.source(), f.header.length);
  f.tagged = true;
}

void Stream::untag_unsent_locked() {
  if (!tx_mac_) return;
  size_t i = 0;
  while (i < queue_.size() && queue_[i].sent > 0) ++i;
  if (i == queue_.size() || !queue_[i].tagged) return;
  tx_mac_->rewind(queue_[i].tag_counter);
  for (; i < queue_.size() && queue_[i].tagged; ++i) queue_[i].tagged = false;
}

void Stream::integrity_failure(const char* what) const {
  throw Error(ErrorCategory::kRemote,
              "rank " + std::to_string(peer_) + " (stream " + std::to_string(index_) + "): " +
                  what + " failed its integrity check (PLAIT_TCP_INTEGRITY): the bytes were "
                  "altered on the way, or a frame was lost, replayed or reordered; the "
                  "connection is no longer trusted");
}

int Stream::submit(Frame frame, FinishedOps* finished) {
  std::lock_guard lock(mu_);
  // Closed on purpose (peer failed or said goodbye): the frame's op fails with the peer.
  if (!sending_) return 0;
  if (!queue_.empty() && is_urgent_reply(frame.header.type)) {
    // Behind what has started or is tagged (its bytes and tag counters are fixed) and behind
    // the replies queued before it; ahead of everything else.
    size_t at = 0;
    while (at < queue_.size() &&
           (queue_[at].sent > 0 || queue_[at].tagged || is_urgent_reply(queue_[at].header.type)))
      ++at;
    queue_.insert(at, std::move(frame));
    return 0;  // a write is pending on EPOLLOUT
  }
  queue_.push_back(std::move(frame));
  // A non-empty queue means a write is already pending on EPOLLOUT; keep the order.
  if (queue_.size() > 1) return 0;
  return flush_locked(finished);
}

Stream::DirectWrite Stream::write_now(const WireHeader& header, const char* payload,
                                      int* error) {
  std::lock_guard lock(mu_);
  if (!sending_ || !queue_.empty()) return DirectWrite::kNotNow;
  Frame f;
  f.header = header;
  f.payload = payload;
  tag_locked(f);
  iovec iov[4];
  size_t iovcnt = 0;
  iov[iovcnt++] = {const_cast<WireHeader*>(&header), sizeof(WireHeader)};
  if (f.tagged) iov[iovcnt++] = {f.header_tag.data(), kTagBytes};
  if (header.length > 0) iov[iovcnt++] = {const_cast<char*>(payload), header.length};
  if (f.tagged && header.length > 0) iov[iovcnt++] = {f.payload_tag.data(), kTagBytes};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = iovcnt;
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
  if (written == wire_size(f)) return DirectWrite::kWritten;
  // A full socket (EPOLLOUT continues it): the rest goes out of a copy, frame-ordered; its
  // tags stay valid (the same bytes), and if none of it went, it is tagged again in turn.
  f.owned.assign(payload, header.length);
  f.payload = nullptr;
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
    while (i < queue_.size() && iovcnt + 4 <= kMaxIov && planned < kMaxWriteBytes) {
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
        if (f.tagged) untag_unsent_locked();  // its counters go to the frames after it
        queue_.pop_front();
        continue;
      }
      // Readable here unless partly written (an unreadable unstarted frame was dropped):
      // the tags read the payload now, under the same guard or pin as the write.
      if (f.sent == 0) tag_locked(f);
      // The frame on the wire: header | header tag | payload | payload tag (tags only with
      // integrity, the payload's only when there is a payload).
      constexpr size_t kHeader = sizeof(WireHeader);
      const size_t tag_bytes = f.tagged ? kTagBytes : 0;
      const size_t payload_at = kHeader + tag_bytes;
      const size_t length = f.header.length;
      size_t at = f.sent;
      auto add = [&](const void* p, size_t n) {
        iov[iovcnt++] = {const_cast<void*>(p), n};
        planned += n;
        at += n;
      };
      if (at < kHeader) add(reinterpret_cast<char*>(&f.header) + at, kHeader - at);
      if (at < payload_at) add(f.header_tag.data() + (at - kHeader), payload_at - at);
      if (at < payload_at + length) {
        const size_t offset = at - payload_at;
        if (!readable) {
          add(kZeros, std::min(length - offset, kZeroBytes));
          break;  // padding goes out one piece at a time
        }
        add(f.source() + offset, length - offset);
      }
      if (tag_bytes > 0 && length > 0 && at < payload_at + length + kTagBytes)
        add(f.payload_tag.data() + (at - payload_at - length), payload_at + length + kTagBytes - at);
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
      if (would_block(err)) return 0;  // tagged frames keep their tags for the next turn
      sending_ = false;
      send_error_ = err;
      queue_.clear();
      return err;
    }
    auto written = static_cast<size_t>(n);
    while (written > 0) {
      Frame& f = queue_.front();
      size_t take = std::min(written, wire_size(f) - f.sent);
      f.sent += take;
      written -= take;
      if (f.sent == wire_size(f)) {
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
      received_bytes_ += static_cast<size_t>(n);
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
    if (in_trailer_) {
      if (rx_end_ - rx_begin_ < kTagBytes) {
        if (consumed >= budget) return ReadResult::kMore;
        ReadResult r = read_into_buffer(&consumed, error);
        if (r != ReadResult::kMore) return r;
        continue;
      }
      const Tag want = rx_mac_->finish();
      if (CRYPTO_memcmp(want.data(), rx_.data() + rx_begin_, kTagBytes) != 0)
        integrity_failure("the payload of a frame");
      rx_begin_ += kTagBytes;
      in_trailer_ = false;
      Incoming done = std::move(incoming_);
      incoming_ = Incoming();
      handler.on_payload(*this, rx_header_, done);
      continue;
    }
    if (!in_payload_) {
      const size_t head = sizeof(WireHeader) + (rx_mac_ ? kTagBytes : 0);
      if (rx_end_ - rx_begin_ < head) {
        if (consumed >= budget) return ReadResult::kMore;
        ReadResult r = read_into_buffer(&consumed, error);
        if (r != ReadResult::kMore) return r;
        continue;
      }
      std::memcpy(&rx_header_, rx_.data() + rx_begin_, sizeof(WireHeader));
      if (rx_mac_) {
        // Trusted before it steers anything: which buffer, how many bytes.
        const Tag want = rx_mac_->tag(&rx_header_, sizeof(WireHeader));
        if (CRYPTO_memcmp(want.data(), rx_.data() + rx_begin_ + sizeof(WireHeader), kTagBytes) != 0)
          integrity_failure("a frame's header");
      }
      rx_begin_ += head;
      incoming_ = handler.on_header(*this, rx_header_);
      if (rx_mac_ && rx_header_.length > 0) {
        rx_mac_->begin();
        incoming_.sink.set_mac(rx_mac_.get());
      }
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
          received_bytes_ += static_cast<size_t>(n);
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
    if (rx_mac_ && rx_header_.length > 0) {
      in_trailer_ = true;  // its operation completes once the tag matches
      continue;
    }
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
