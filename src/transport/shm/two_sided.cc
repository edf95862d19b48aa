// Tagged send/recv over shared memory.
//
//   eager (len < threshold)   one kEager record: the payload is copied into the ring by the
//                             sender (the send completes right there) and out of it by the
//                             drainer, straight into the posted receive buffer; unexpected,
//                             into a buffer, copied once more when the recv is posted.
//   rendezvous, CMA           kRts names the sender's buffer; the receiver, once matched,
//                             pulls it with process_vm_readv straight into the destination
//                             (one copy, in chunks) and answers kFin: the send completes.
//   rendezvous, fallback      without CMA between the pair, the receiver answers kCts with
//                             its op id and the sender streams kData pieces through the ring,
//                             pipelined: the receiver copies each piece out while the sender
//                             writes the next.
//
// Cancelling a send: cancel() fences our own copies out of the send buffer (outbox.fence()).
// A CMA pull is the receiver's read of our memory, which we cannot fence: a receiver still
// pulling when our caller frees the buffer gets EFAULT (its recv fails), or, if the memory
// is reused at once, bytes that are not the message. The receiver's communicator learns of
// our abort from its notice; a per-send "withdrawn" record would narrow the window further.
#include <cstring>

#include "transport/shm/cma.h"
#include "transport/shm/shm_fabric.h"

namespace plait::transport::shm {
namespace {

// A CMA chunk: long enough that the syscall is noise (~200 us at 5 GB/s), short enough that
// other rings are served in between and cancel() waits no longer than that.
constexpr size_t kPullChunk = 1 << 20;

}  // namespace

void ShmFabric::send(int peer, const void* buf, size_t len, uint64_t tag, uint64_t header,
                     CompletionQueue* cq, uint64_t context) {
  Peer& p = *checked_peer(peer, "send");
  PolicyCompletionQueue* q = checked_cq(cq, "send");
  if (!buf && len > 0)
    throw invalid_usage("null buffer", {.rank = rank_, .peer = peer, .op = "send",
                                        .bytes = static_cast<int64_t>(len)});
  Record r;
  r.tag = tag;
  r.word = header;
  if (len < eager_threshold_ && len <= p.outbox.max_payload()) {
    r.type = RecordType::kEager;
    // The fast path: no op, no allocation, no syscall unless the receiver sleeps.
    if (!p.failed.load(std::memory_order_relaxed) && p.outbox.try_write(r, buf, len)) {
      p.outbox.notify();
      complete_now(q, OpType::kSend, peer, len, tag, context);
      return;
    }
    OpRef op = new_op(OpType::kSend, peer, q, context);
    op->length = len;
    op->tag = tag;
    if (!admit(op)) return;
    Pending item;
    item.kind = Pending::Kind::kEagerSend;
    item.header = r;
    item.op = op;
    item.source = static_cast<const char*>(buf);
    item.total = len;
    p.outbox.post(std::move(item));
    return;
  }
  OpRef op = new_op(OpType::kSend, peer, q, context);
  op->local = const_cast<char*>(static_cast<const char*>(buf));
  op->length = len;
  op->tag = tag;
  op->header = header;
  if (!admit(op)) return;
  r.type = RecordType::kRts;
  r.flags = p.link.cma ? kFlagCma : 0;
  r.id = op->id;
  r.arg0 = len;
  r.arg1 = reinterpret_cast<uintptr_t>(buf);
  send_record(p, r);
}

void ShmFabric::recv(int peer, void* buf, size_t capacity, uint64_t tag, CompletionQueue* cq,
                     uint64_t context) {
  post_recv(peer, buf, capacity, tag, cq, context, nullptr);
}

void ShmFabric::recv_any_sibling(void* buf, size_t capacity, uint64_t tag, CompletionQueue* cq,
                                 uint64_t context, std::shared_ptr<std::atomic<bool>> sibling) {
  post_recv(kAnySource, buf, capacity, tag, cq, context, std::move(sibling));
}

void ShmFabric::post_recv(int peer, void* buf, size_t capacity, uint64_t tag,
                          CompletionQueue* cq, uint64_t context,
                          std::shared_ptr<std::atomic<bool>> sibling) {
  OpRef op = new_recv(peer, buf, capacity, tag, cq, context, std::move(sibling));
  match_recv(op, peer, matcher_, [&](const OpRef& recv, const Unexpected& m) {
    accept_rendezvous(recv, *peer_of(m.source), m);
  });
}

void ShmFabric::accept_rendezvous(const OpRef& recv, Peer& source, const Unexpected& request) {
  Record answer;
  answer.id = request.sender_op;
  answer.type = request.cma ? RecordType::kFin : RecordType::kCts;
  if (truncated(*recv, request.length) || recv->done()) {
    answer.flags = kFlagDeclined;  // the sender completes without its payload being taken
    send_record(source, answer);
    return;
  }
  // In the table from now on: cancel() and peer failures find it there, kData finds it by id.
  ops_.add(recv);
  if (!request.cma) {
    answer.arg0 = recv->id;
    send_record(source, answer);
    return;
  }
  Transfer t;
  t.kind = Transfer::Kind::kPull;
  t.op = recv;
  t.peer = &source;
  t.remote = request.sender_addr;
  t.sender_op = request.sender_op;
  queue_transfer(std::move(t));
}

bool ShmFabric::step_pull(Transfer& t) {
  Op& op = *t.op;
  Peer& p = *t.peer;
  const uint64_t length = op.message_length.load(std::memory_order_relaxed);
  Record fin;
  fin.type = RecordType::kFin;
  fin.id = t.sender_op;
  int err = 0;
  size_t n = std::min<size_t>(kPullChunk, length - t.done);
  {
    std::shared_lock lock(user_memory_guard_);
    if (!op.done()) err = n > 0 ? cma_read(p.link.pid, op.local + t.done, t.remote + t.done, n) : 0;
  }
  if (op.done()) {  // cancelled or failed: the sender keeps its buffer and completes
    fin.flags = kFlagDeclined;
    send_record(p, fin);
    return true;
  }
  if (err != 0) {
    fail(op, cma_error(p, err, "process_vm_readv of the send buffer", context_of(op)));
    fin.flags = kFlagFailed;
    send_record(p, fin);
    return true;
  }
  // A sender that shut its fabric down abandoned the send: its buffer may be gone already,
  // and what we read after that is not its message. (Checked after each chunk: while the
  // flag was clear, the chunk read was of live memory.)
  if (p.view.header().closed.load(std::memory_order_acquire) != 0) {
    fail_remote(op, "rank " + std::to_string(p.rank) +
                        " shut down its fabric while its message was being received");
    return true;
  }
  t.done += n;
  if (t.done < length) return false;
  send_record(p, fin);
  succeed(op);
  return true;
}

// --- incoming (drainer) ---

void ShmFabric::on_eager(Peer& p, const Record& r, const char* payload) {
  // Held across matching and copying: a cancel() that misses this recv in the matcher waits
  // until the copy is done, so nothing is written after it returns.
  std::shared_lock lock(user_memory_guard_);
  Matcher::Arrival a =
      matcher_.arrive(p.rank, r.tag, r.word, r.payload, false, [&](Unexpected& e) {
        e.data.assign(payload, payload + r.payload);
        e.complete = true;
      });
  if (a.over_limit) throw remote_error(unexpected_limit_error(p.rank, r.payload, a.usage, matcher_.limits()));
  if (!a.recv) return;
  Op& recv = *a.recv;
  if (truncated(recv, r.payload) || recv.done()) return;
  if (r.payload > 0) std::memcpy(recv.local, payload, r.payload);
  succeed(recv);
}

void ShmFabric::on_rts(Peer& p, const Record& r) {
  std::shared_lock lock(user_memory_guard_);  // as in on_eager, until the recv is in the table
  Matcher::Arrival a = matcher_.arrive(p.rank, r.tag, r.word, r.arg0, true, [&](Unexpected& e) {
    e.sender_op = r.id;
    e.sender_addr = r.arg1;
    e.cma = (r.flags & kFlagCma) != 0;
  });
  if (a.over_limit) throw remote_error(unexpected_limit_error(p.rank, r.arg0, a.usage, matcher_.limits()));
  if (!a.recv) return;
  Unexpected request;
  request.length = r.arg0;
  request.sender_op = r.id;
  request.sender_addr = r.arg1;
  request.cma = (r.flags & kFlagCma) != 0;
  accept_rendezvous(a.recv, p, request);
}

void ShmFabric::on_cts(Peer& p, const Record& r) {
  OpRef op = ops_.find(r.id);
  if (!op || op->done()) return;  // cancelled or failed meanwhile
  if (op->type != OpType::kSend || op->peer.load() != p.rank)
    throw remote_error("clear-to-send for op " + std::to_string(r.id) + ", not a send to it");
  if (r.flags & kFlagDeclined) {
    succeed(*op);  // the receiver reported the truncation on its side
    return;
  }
  Pending item;
  item.kind = Pending::Kind::kStream;
  item.header.type = RecordType::kData;
  item.header.id = r.arg0;
  item.op = op;
  item.source = op->local;
  item.total = op->length;
  item.chunk = p.outbox.max_payload();
  p.outbox.post(std::move(item));
}

void ShmFabric::on_fin(Peer& p, const Record& r) {
  OpRef op = ops_.find(r.id);
  if (!op || op->done()) return;
  if (op->type != OpType::kSend || op->peer.load() != p.rank)
    throw remote_error("FIN for op " + std::to_string(r.id) + ", not a send to it");
  if (r.flags & kFlagFailed)
    fail_remote(*op, "rank " + std::to_string(p.rank) +
                         " could not read the send buffer by cross-memory attach");
  else
    succeed(*op);
}

void ShmFabric::on_data(Peer& p, const Record& r, const char* payload) {
  OpRef op = ops_.find(r.id);
  if (!op || op->done()) return;  // cancelled or failed: the piece is dropped
  const uint64_t length = op->message_length.load();
  if (op->type != OpType::kRecv || op->peer.load() != p.rank || r.word > length ||
      r.payload > length - r.word)
    throw remote_error("data piece at offset " + std::to_string(r.word) + " + " +
                       std::to_string(r.payload) + " does not belong to op " +
                       std::to_string(r.id));
  {
    std::shared_lock lock(user_memory_guard_);
    if (op->done()) return;
    if (r.payload > 0) std::memcpy(op->local + r.word, payload, r.payload);
  }
  op->received += r.payload;
  if (op->received == length) succeed(*op);
}

void ShmFabric::on_send_aborted(Peer& p, const Record& r) {
  OpRef op = ops_.find(r.id);
  if (!op || op->done() || op->type != OpType::kRecv || op->peer.load() != p.rank) return;
  fail_remote(*op, "rank " + std::to_string(p.rank) +
                       " cancelled the send before all of its data was through");
}

}  // namespace plait::transport::shm
