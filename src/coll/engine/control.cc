// The engine's control channel: one receive from any source on the communicator's control
// tag, always posted, that hears the peers' abort notices (which abort this rank too) and
// their stall inquiries (handed to the stall inspector through the activity).
#include <cstring>

#include "coll/engine/comm_engine.h"
#include "coll/engine/internal.h"
#include "coll/schedule/tags.h"

namespace plait::coll {

using namespace engine;

void CommEngine::on_control_message(const transport::Completion& c) {
  if (c.header == kStallInquiry && c.bytes == sizeof(StallInquiryWire)) {
    StallInquiryWire m;
    std::memcpy(&m, control_buf_.data(), sizeof m);
    activity_->inquired({.round = m.round, .request = m.request});
    post_control_recv();
    return;
  }
  std::string text(control_buf_.data(), std::min(c.bytes, control_buf_.size()));
  do_abort("rank " + std::to_string(comm_rank_of(c.peer)) + " aborted: " + text, false);
}

void CommEngine::send_stall_inquiry(uint64_t round, int64_t request) {
  const StallInquiryWire* m;
  {
    std::lock_guard lock(mu_);
    if (abort_error_) return;  // the abort's notice says more than any report could
    m = &inquiries_.emplace_back(StallInquiryWire{.round = round, .request = request});
  }
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank_ || fabric_->peer_failed(fabric_rank_[peer])) continue;
    try {
      fabric_->send(fabric_rank_[peer], m, sizeof *m, make_tag(comm_id_, TagKind::kControl, 0),
                    kStallInquiry, cq_.get(), (kControlContext << kKindShift) | 2);
    } catch (const Error&) {
      // Unreachable: the report names it as not answering.
    }
  }
}

// The control receive takes any source, so the fabric fails it when any of its peers dies,
// in this communicator or not. Without a new one this rank would never read the abort
// notice of the member that saw the death, and would fail later with whatever its own
// peers do next (a neighbour that aborted and shut down), never naming the rank that died.
void CommEngine::control_recv_failed() {
  {
    std::lock_guard lock(mu_);
    if (abort_error_) return;  // cancelled by our own abort: nothing more to hear
  }
  bool member_alive = false;
  for (int peer = 0; peer < size(); ++peer)
    if (peer != rank_ && !fabric_->peer_failed(fabric_rank_[peer])) member_alive = true;
  // With every member gone no notice can come any more, but one may be waiting in the
  // fabric already, sent before its sender left: one more receive takes it, or fails at once
  // when there is none (and then no other follows).
  if (!member_alive) {
    if (last_control_recv_) return;
    last_control_recv_ = true;
  }
  post_control_recv();
}

void CommEngine::post_control_recv() {
  fabric_->recv(transport::kAnySource, control_buf_.data(), control_buf_.size(),
                make_tag(comm_id_, TagKind::kControl, 0), cq_.get(), kControlContext << kKindShift);
}

}  // namespace plait::coll
