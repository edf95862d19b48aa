// Tagged send/recv over the UCX provider, and the bookkeeping of UCP requests.
//
//   send   one active message kAmMessage: header {source, tag, word}, the payload as its data.
//          UCX sends a small one eagerly and a large one by rendezvous; either way the send
//          completes when UCX is done with the buffer.
//   recv   matched by plait's TagMatcher on arrival (callback) or on posting. An eager
//          payload is copied into the receive (or buffered until it is posted); a rendezvous
//          one stays a UCP descriptor until matched, then ucp_am_recv_data_nbx pulls it
//          straight into the receive buffer.
//
// Ordering: UCP delivers the active messages of one endpoint in the order they were sent
// (the UCX provider's non-overtaking rule rests on it, like tcp's on its stream 0).
#include <cstring>

#include "core/log.h"
#include "transport/ucx/ucx_api.h"
#include "transport/ucx/ucx_fabric.h"

namespace plait::transport::ucx {

// --- requests ---

ucp_request_param_t UcxFabric::send_param(uint32_t flags) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FIELD_FLAGS;
  p.cb.send = &UcxFabric::on_request_done;
  p.user_data = this;
  p.flags = flags;
  return p;
}

ucs_status_ptr_t UcxFabric::am_send(int peer, AmId id, const void* header, size_t header_bytes,
                                    const void* data, size_t bytes, uint32_t flags) {
  // Closed (our fabric shuts down: a callback during the close may want to answer).
  if (!w_.eps[peer]) return UCS_STATUS_PTR(UCS_ERR_NOT_CONNECTED);
  ucp_request_param_t p = send_param(flags);
  return ucx().ucp_am_send_nbx(w_.eps[peer], id, header, header_bytes, data, bytes, &p);
}

void UcxFabric::send_tracked(int peer, AmId id, InFlight in, const void* data, size_t bytes,
                             RequestDone done, uint32_t flags) {
  in.peer = peer;
  ucs_status_ptr_t r = am_send(peer, id, in.header.data(), in.header.size(), data, bytes, flags);
  track(r, std::move(in), done);
}

void UcxFabric::track(ucs_status_ptr_t request, InFlight in, RequestDone done) {
  in.done = done;
  if (!UCS_PTR_IS_PTR(request)) {  // finished inside the call, or failed there
    if (done) done(*this, in, UCS_PTR_STATUS(request));
    return;
  }
  // UCX calls back only from ucx().ucp_worker_progress(), which needs worker_mu_, held here.
  in_flight_.emplace(request, std::move(in));
  // A caller that polls progresses the worker; else the sleeping thread must.
  // (A parked thread is not woken: callers polled a moment ago and, as a rule, poll again
  // next; it looks by itself within its check period.)
  if (sleeping_.load(std::memory_order_seq_cst) && pollers_.load(std::memory_order_seq_cst) == 0)
    wake_progress();
}

void UcxFabric::on_request_done(void* request, ucs_status_t status, void* user_data) {
  auto& f = *static_cast<UcxFabric*>(user_data);
  auto it = f.in_flight_.find(request);
  if (it != f.in_flight_.end()) {
    InFlight in = std::move(it->second);
    f.in_flight_.erase(it);
    if (in.done) in.done(f, in, status);
  }
  ucx().ucp_request_free(request);
}

void UcxFabric::on_recv_data_done(void* request, ucs_status_t status, size_t,
                                  void* user_data) {
  on_request_done(request, status, user_data);
}

Error UcxFabric::status_error(int peer, ucs_status_t status, const char* what,
                             ErrorContext context) const {
  if (peer >= 0 && peers_[peer] && peers_[peer]->failed.load())
    return remote_error(peers_[peer]->reason(), std::move(context));
  if (status == UCS_ERR_CANCELED) return aborted_error("cancelled", std::move(context));
  return remote_error(std::string("UCX ") + what + " failed: " + ucx().ucs_status_string(status),
                      std::move(context));
}

void UcxFabric::fail_with_status(Op& op, ucs_status_t status, const char* what) {
  if (op.done()) return;
  fail(op, status_error(op.peer.load(), status, what, context_of(op)));
}

MessageHeader* UcxFabric::take_header_slot() {
  if (free_headers_.empty()) {
    header_storage_.push_back(std::make_unique<MessageHeader>());
    return header_storage_.back().get();
  }
  MessageHeader* h = free_headers_.back();
  free_headers_.pop_back();
  return h;
}

// --- send ---

// A small send usually finishes inside ucp_am_send_nbx (UCX copied it out): then it is
// completed on the spot, without an op (no pool block, no op table, no claim), which was
// about a third of an 8 B ping-pong over UCX's shared memory. Only a send UCX still holds
// gets an op, for cancel() and a peer's failure to find.
void UcxFabric::send(int peer, const void* buf, size_t len, uint64_t tag, uint64_t header,
                     CompletionQueue* cq, uint64_t context) {
  check_peer(peer, "send");
  PolicyCompletionQueue* q = checked_cq(cq, "send");
  if (!buf && len > 0) throw invalid_usage("null buffer", call_context(peer, "send", len));
  expect_transfer(len);
  std::unique_lock lock(worker_mu_);
  if (peers_[peer]->failed.load()) {
    lock.unlock();
    complete_now(q, OpType::kSend, peer, len, tag, context,
                 std::make_shared<const Error>(
                     remote_error(peers_[peer]->reason(), call_context(peer, "send", len))));
    return;
  }
  MessageHeader* h = take_header_slot();
  h->source = rank_;
  h->tag = tag;
  h->word = header;
  ucs_status_ptr_t request = am_send(peer, kAmMessage, h, sizeof *h, buf, len);
  if (!UCS_PTR_IS_PTR(request)) {
    free_headers_.push_back(h);
    lock.unlock();
    const ucs_status_t status = UCS_PTR_STATUS(request);
    complete_now(q, OpType::kSend, peer, len, tag, context,
                 status == UCS_OK ? nullptr
                                  : std::make_shared<const Error>(status_error(
                                        peer, status, "send", call_context(peer, "send", len))));
    return;
  }
  OpRef op = new_op(OpType::kSend, peer, q, context);
  op->local = const_cast<char*>(static_cast<const char*>(buf));
  op->length = len;
  op->tag = tag;
  op->header = header;
  InFlight in;
  in.op = op;
  in.peer = peer;
  in.message_header = h;
  track(request, std::move(in), [](UcxFabric& f, InFlight& in, ucs_status_t status) {
    f.free_headers_.push_back(in.message_header);
    if (status == UCS_OK) f.succeed(*in.op);
    else f.fail_with_status(*in.op, status, "send");
  });
  // After it is tracked: a failure of the peer from here on finds the op in the table, one
  // before fails it here; either way its request is cancelled with the endpoint.
  admit(op);
}

// --- recv ---

void UcxFabric::recv(int peer, void* buf, size_t capacity, uint64_t tag, CompletionQueue* cq,
                     uint64_t context) {
  post_recv(peer, buf, capacity, tag, cq, context, nullptr);
}

void UcxFabric::recv_any_sibling(void* buf, size_t capacity, uint64_t tag, CompletionQueue* cq,
                                 uint64_t context, std::shared_ptr<std::atomic<bool>> sibling) {
  post_recv(kAnySource, buf, capacity, tag, cq, context, std::move(sibling));
}

void UcxFabric::post_recv(int peer, void* buf, size_t capacity, uint64_t tag,
                          CompletionQueue* cq, uint64_t context,
                          std::shared_ptr<std::atomic<bool>> sibling) {
  // Posted receives live in the matcher (cancel() and a peer's failure look there too); a
  // receive enters the op table only if its message comes by rendezvous.
  OpRef op = new_recv(peer, buf, capacity, tag, cq, context, std::move(sibling));
  match_recv(op, peer, matcher_, [&](const OpRef& recv, Unexpected& m) {
    std::lock_guard lock(worker_mu_);
    if (receive_rendezvous(recv, m.rndv_desc, m.length) == UCS_OK)
      ucx().ucp_am_data_release(w_.worker, m.rndv_desc);  // dropped: the send completes
    m.rndv_desc = nullptr;
  });
}

ucs_status_t UcxFabric::receive_rendezvous(const OpRef& recv, void* desc, uint64_t length) {
  if (truncated(*recv, length)) return UCS_OK;
  // In flight from here on: where cancel() and a peer's failure find it.
  ops_.add(recv);
  if (recv->done()) return UCS_OK;
  expect_transfer(length);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = &UcxFabric::on_recv_data_done;
  p.user_data = this;
  InFlight in;
  in.op = recv;
  track(ucx().ucp_am_recv_data_nbx(w_.worker, desc, recv->local, length, &p), std::move(in),
        [](UcxFabric& f, InFlight& in, ucs_status_t status) {
          if (status == UCS_OK) f.succeed(*in.op);
          else f.fail_with_status(*in.op, status, "receive");
        });
  return UCS_INPROGRESS;
}

ucs_status_t UcxFabric::on_message(void* arg, const void* header, size_t header_bytes,
                                   void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto& f = *static_cast<UcxFabric*>(arg);
  const bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
  MessageHeader h;
  if (!read_header(header, header_bytes, &h)) {
    log(LogLevel::kWarn, "rank ", f.rank_, ": ucx fabric '", f.name_, "': dropped a message with a ",
        header_bytes, "-byte header");
    return UCS_OK;  // inside the callback, UCS_OK drops a rendezvous descriptor too
  }
  const int source = f.checked_source(h.source, "message");
  if (source < 0 || f.peers_[source]->failed.load()) return UCS_OK;
  Matcher::Arrival a = f.matcher_.arrive(source, h.tag, h.word, length, rndv, [&](Unexpected& e) {
    if (rndv) {
      e.rndv_desc = data;
    } else {
      e.data.assign(static_cast<const char*>(data), static_cast<const char*>(data) + length);
      e.complete = true;
    }
  });
  if (a.over_limit) {
    f.fail_peer(source, unexpected_limit_error(source, length, a.usage, f.matcher_.limits()),
                false);
    return UCS_OK;
  }
  if (a.unexpected) return rndv ? UCS_INPROGRESS : UCS_OK;  // kept until its recv comes
  Op& recv = *a.recv;
  if (rndv) return f.receive_rendezvous(a.recv, data, length);
  if (f.truncated(recv, length)) return UCS_OK;
  if (length > 0) {
    std::shared_lock guard(f.user_memory_guard_);
    if (recv.done()) return UCS_OK;
    std::memcpy(recv.local, data, length);
  }
  f.succeed(recv);
  return UCS_OK;
}

}  // namespace plait::transport::ucx
