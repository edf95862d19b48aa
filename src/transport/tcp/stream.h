// One socket of a peer connection: a queue of outgoing frames written with writev, and the
// incoming side's state machine (header, then payload into a Sink).
//
// Sending may happen on any thread under the stream's lock: a caller whose frame finds the
// queue idle writes it right away (the low-latency path), whoever reads the sockets writes
// the rest when epoll says the socket has room. Receiving is done by one thread at a time,
// under the fabric's rx lock: its progress thread, or a caller polling inline.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "core/futex_shared_mutex.h"
#include "core/futex_mutex.h"
#include "core/socket.h"
#include "transport/memory_registry.h"
#include "transport/ring_queue.h"
#include "transport/tcp/matcher.h"
#include "transport/pending_op.h"
#include "transport/tcp/integrity.h"
#include "transport/tcp/sink.h"
#include "transport/tcp/wire.h"

namespace plait::transport::tcp {

// A message to write: header, then `header.length` payload bytes from one source.
struct Frame {
  WireHeader header;
  // The payload's source: `payload` (user or registered memory) or `owned` (reason texts).
  const char* payload = nullptr;
  std::string owned;
  // The local op this frame belongs to. Its memory is read only while the op is not
  // finished; a frame of a finished op that has not started is dropped.
  OpRef op;
  // The payload is registered memory (a read response): read only while pinned. If the
  // region is deregistered before the frame starts, `if_revoked` goes out instead as a
  // denial, so that the initiator is told and not handed stale bytes.
  RegionRef region;
  std::string if_revoked;
  // Counts as one of op->parts_left once fully written; the last one finishes the op.
  bool counts_for_op = false;
  size_t sent = 0;  // bytes of the frame on the wire written so far (tags included)
  // PLAIT_TCP_INTEGRITY: the frame's tags, made when it is first gathered for writing, and
  // the sender's tag counter before them (unsent frames give their counters back).
  bool tagged = false;
  Tag header_tag{};
  Tag payload_tag{};
  uint64_t tag_counter = 0;

  size_t size() const { return sizeof(WireHeader) + header.length; }
  const char* source() const { return owned.empty() ? payload : owned.data(); }
};

// What the receiver decided for an incoming header; handed back with the payload.
struct Incoming {
  Sink sink;
  OpRef op;                 // the local op the payload belongs to
  UnexpectedRef unexpected; // an eager message nobody was waiting for
  std::string denial;       // a one-sided request the target refused: the reason
};

// The ops whose last frame a write put on the wire, for the caller to report outside the
// stream's lock. A write finishes one or two ops as a rule: they are kept inline, so that a
// send allocates nothing for this list.
class FinishedOps {
 public:
  void push_back(OpRef op) {
    if (inline_count_ < kInline)
      inline_[inline_count_++] = std::move(op);
    else
      more_.push_back(std::move(op));
  }
  template <typename F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < inline_count_; ++i) f(*inline_[i]);
    for (const OpRef& op : more_) f(*op);
  }

 private:
  static constexpr size_t kInline = 4;
  std::array<OpRef, kInline> inline_;
  size_t inline_count_ = 0;
  std::vector<OpRef> more_;
};

class Stream;

class StreamHandler {
 public:
  virtual ~StreamHandler() = default;
  // May throw plait::Error for a protocol violation; the peer is then failed.
  virtual Incoming on_header(Stream& stream, const WireHeader& header) = 0;
  virtual void on_payload(Stream& stream, const WireHeader& header, Incoming& incoming) = 0;
};

class Stream {
 public:
  // `keys`: this socket's PLAIT_TCP_INTEGRITY keys, or null when it is off.
  Stream(net::Fd fd, int peer, int index, FutexSharedMutex* user_memory_guard,
         const StreamKeys* keys = nullptr);

  int fd() const { return fd_.get(); }
  int peer() const { return peer_; }
  int index() const { return index_; }

  // --- sending, any thread ---
  // Queues the frame; if the queue was idle, writes what the socket takes now. An op whose
  // last counted frame (Frame::counts_for_op) went out is claimed here, under the lock, and
  // appended to *finished for the caller to report outside it: a peer failure, which closes
  // the streams (taking this lock) before it sweeps the pending ops, can then never fail an
  // op whose bytes are all on the wire.
  // Returns 0, or the errno when this write broke the socket. A frame for a stream that is
  // closed or broken is dropped: its op fails together with the peer.
  int submit(Frame frame, FinishedOps* finished);
  // The small-message path that needs no op: if nothing is queued, writes header and
  // payload now. kWritten: all of it went out. kCopied: the socket took part (or none) of
  // it; the rest is queued from a private copy, so the caller's buffer is free either way.
  // kNotNow: frames are queued (the message must go behind them, with an op) or the stream
  // is closed; *error is set when this write broke the socket.
  enum class DirectWrite { kWritten, kCopied, kNotNow };
  DirectWrite write_now(const WireHeader& header, const char* payload, int* error);
  // Writes queued frames until the socket is full (after EPOLLOUT).
  int flush(FinishedOps* finished);
  // Stops sending for good: drops the queue; with shut_write, the peer reads EOF.
  void close_sending(bool shut_write);
  bool idle();
  // The errno that broke sending, 0 if none.
  int send_error();

  // For cancel(): holding this lock, the caller finishes ops whose frames may be queued
  // here, then calls keep_started_frame_locked(): the one frame that may be partly on the
  // wire continues from a private copy of its payload, so the stream stays in sync without
  // reading the cancelled op's memory after cancel() returns. Unstarted frames of finished
  // ops are dropped by the writer.
  std::unique_lock<FutexMutex> lock_sending() { return std::unique_lock(mu_); }
  void keep_started_frame_locked();

  // --- receiving, under the fabric's rx lock ---
  enum class ReadResult { kDrained, kMore, kClosed, kError };
  // Reads and dispatches messages until the socket is empty or `budget` bytes were read.
  // kClosed: EOF, or the peer's goodbye was read (goodbye_received()).
  ReadResult receive(StreamHandler& handler, size_t budget, int* error);
  // Reads and throws away everything (during shutdown).
  ReadResult drain(int* error);
  void mark_goodbye() { goodbye_received_ = true; }
  // Bytes read from the socket so far: the keep-alive check sees a peer that said nothing.
  uint64_t received_bytes() const { return received_bytes_; }
  bool goodbye_received() const { return goodbye_received_; }

  // Bookkeeping of whoever reads the sockets (under the fabric's rx lock).
  bool in_ready_list = false;
  bool receiving = true;  // false once closed for reading
  // epoll reported a hang-up or error: the EOF may already be in, behind the data, with no
  // edge left to announce it, so reads go on until EAGAIN or EOF (no short-read shortcut).
  bool hangup_seen = false;

 private:
  int flush_locked(FinishedOps* finished);
  // Bytes `f` takes on the wire: header, payload, and with integrity their tags.
  size_t wire_size(const Frame& f) const {
    const size_t tags = tx_mac_ ? kTagBytes + (f.header.length > 0 ? kTagBytes : 0) : 0;
    return f.size() + tags;
  }
  void tag_locked(Frame& f);
  // Before an unsent tagged frame is dropped: it and the frames tagged after it give their
  // tag counters back (they are tagged again, in order, when they go out).
  void untag_unsent_locked();
  [[noreturn]] void integrity_failure(const char* what) const;
  ReadResult read_into_buffer(size_t* consumed, int* error);
  void compact();

  net::Fd fd_;
  const int peer_;
  const int index_;
  FutexSharedMutex* user_memory_guard_;

  FutexMutex mu_;
  RingQueue<Frame> queue_;  // guarded by mu_
  bool sending_ = true;      // guarded by mu_
  int send_error_ = 0;       // guarded by mu_

  std::vector<char> rx_;
  size_t rx_begin_ = 0;
  size_t rx_end_ = 0;
  // The last recv got less than it asked for: the socket was empty then, and whatever
  // arrives after it raises a new edge on the epoll. Reading again now would only return
  // EAGAIN: one system call per message saved.
  bool rx_empty_ = false;
  bool in_payload_ = false;
  bool in_trailer_ = false;  // the payload is in; its tag is next
  WireHeader rx_header_;
  Incoming incoming_;
  bool goodbye_received_ = false;
  uint64_t received_bytes_ = 0;
  std::unique_ptr<FrameMac> tx_mac_;  // under mu_
  std::unique_ptr<FrameMac> rx_mac_;  // receiving side
};

}  // namespace plait::transport::tcp
