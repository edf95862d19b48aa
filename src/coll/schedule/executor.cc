#include "coll/schedule/executor.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <sstream>

#include "coll/schedule/tags.h"
#include "core/reduce.h"

namespace plait::coll {

namespace {
constexpr uint8_t kWaiting = 0, kIssued = 1, kDone = 2;
}

ScheduleExecutor::ScheduleExecutor(const Schedule& schedule, ExecBuffers buffers,
                                   const Signature& signature, const ExecPeers& peers, int rank,
                                   uint64_t context_base) {
  reset(schedule, buffers, signature, peers, rank, context_base);
}

void ScheduleExecutor::reset(const Schedule& schedule, ExecBuffers buffers,
                             const Signature& signature, const ExecPeers& peers, int rank,
                             uint64_t context_base) {
  schedule_ = &schedule;
  buffers_ = buffers;
  signature_ = signature;
  signature_word_ = signature.pack();
  peers_ = peers;
  rank_ = rank;
  context_base_ = context_base;
  elem_ = dtype_size(signature.dtype);
  completed_ = 0;
  error_.reset();
  ready_.clear();
  const size_t n = schedule_->steps.size();
  missing_deps_.resize(n);
  for (auto& d : dependents_) d.clear();
  dependents_.resize(n);
  message_index_.resize(n);
  state_.assign(n, kWaiting);
  // Message numbering follows step order (the matching contract), whatever order steps run in.
  for (StepId id = 0; id < n; ++id) {
    const Step& s = schedule_->steps[id];
    missing_deps_[id] = s.dep_count;
    for (StepId d : schedule_->deps_of(s)) dependents_[d].push_back(id);
    if (s.kind == StepKind::kSend) message_index_[id] = (*peers_.sent)[s.peer]++;
    if (s.kind == StepKind::kRecv || s.kind == StepKind::kRecvReduce)
      message_index_[id] = (*peers_.received)[s.peer]++;
  }
}

char* ScheduleExecutor::address(const Slice& slice) const {
  char* base = nullptr;
  switch (slice.buffer) {
    case BufferId::kInput: base = static_cast<char*>(buffers_.input); break;
    case BufferId::kOutput: base = static_cast<char*>(buffers_.output); break;
    case BufferId::kScratch: base = static_cast<char*>(buffers_.scratch); break;
  }
  return base ? base + slice.offset * elem_ : nullptr;
}

void ScheduleExecutor::start() {
  for (StepId id = 0; id < schedule_->steps.size(); ++id)
    if (missing_deps_[id] == 0) ready_.push_back(id);
  std::make_heap(ready_.begin(), ready_.end(), std::greater<>());
  run_ready();
}

void ScheduleExecutor::make_ready(StepId id) {
  ready_.push_back(id);
  std::push_heap(ready_.begin(), ready_.end(), std::greater<>());
}

void ScheduleExecutor::run_ready() {
  // A worklist, not recursion: local steps completing can make long chains ready. Lowest
  // step first: builders write a pipeline's chunks in order, and a peer's transport moves
  // messages in the order they are posted, so the chunk a consumer needs first goes first.
  while (!ready_.empty() && !error_) {
    std::pop_heap(ready_.begin(), ready_.end(), std::greater<>());
    StepId id = ready_.back();
    ready_.pop_back();
    issue(id);
  }
}

void ScheduleExecutor::issue(StepId id) {
  const Step& s = schedule_->steps[id];
  state_[id] = kIssued;
  const uint64_t context = context_base_ | id;
  try {
    switch (s.kind) {
      case StepKind::kSend: {
        uint64_t tag = make_tag(peers_.comm_id, TagKind::kCollective, message_index_[id]);
        peers_.fabric->send((*peers_.fabric_rank)[s.peer], address(s.src), bytes(s.src), tag,
                            signature_word_, peers_.cq, context);
        return;
      }
      case StepKind::kRecv:
      case StepKind::kRecvReduce: {
        const Slice& into = s.kind == StepKind::kRecv ? s.dst : s.src;
        uint64_t tag = make_tag(peers_.comm_id, TagKind::kCollective, message_index_[id]);
        peers_.fabric->recv((*peers_.fabric_rank)[s.peer], address(into), bytes(into), tag,
                            peers_.cq, context);
        return;
      }
      case StepKind::kCopy:
        if (s.src.count > 0 && address(s.src) != address(s.dst))
          std::memmove(address(s.dst), address(s.src), bytes(s.src));
        complete(id);
        return;
      case StepKind::kReduce:
        if (s.src.count > 0)
          reduce_inplace(signature_.dtype, signature_.redop, address(s.dst), address(s.src),
                         s.src.count);
        complete(id);
        return;
    }
  } catch (const Error& e) {
    fail(e);
  }
}

void ScheduleExecutor::complete(StepId id) {
  state_[id] = kDone;
  ++completed_;
  for (StepId next : dependents_[id])
    if (--missing_deps_[next] == 0) make_ready(next);
}

void ScheduleExecutor::fail(Error error) {
  if (!error_) error_ = std::make_shared<const Error>(std::move(error));
}

void ScheduleExecutor::on_completion(const transport::Completion& c) {
  const StepId id = static_cast<StepId>(c.context & 0xffffffffu);
  if (id >= schedule_->steps.size() || state_[id] != kIssued || error_) return;
  const Step& s = schedule_->steps[id];
  ErrorContext ctx{.peer = s.peer, .bytes = static_cast<int64_t>(c.bytes)};
  const bool is_recv = s.kind == StepKind::kRecv || s.kind == StepKind::kRecvReduce;
  if (!c.ok()) {
    ctx.bytes = static_cast<int64_t>(bytes(s.kind == StepKind::kRecv ? s.dst : s.src));
    // A message too long for its buffer is usually a peer in a different collective: say so.
    if (is_recv && c.header != 0 && c.header != signature_word_)
      fail(invalid_usage(mismatch_message(signature_, c.header, s.peer), ctx));
    else
      fail(c.error->with_context(ctx));
    return;
  }
  if (is_recv) {
    if (c.header != signature_word_) {
      fail(invalid_usage(mismatch_message(signature_, c.header, s.peer), ctx));
      return;
    }
    const Slice& into = s.kind == StepKind::kRecv ? s.dst : s.src;
    if (c.bytes != bytes(into)) {
      fail(invalid_usage("expected " + std::to_string(bytes(into)) + " bytes from rank " +
                             std::to_string(s.peer) + ", got " + std::to_string(c.bytes) +
                             "; " + signature_.describe() + " differs across ranks",
                         ctx));
      return;
    }
    if (s.kind == StepKind::kRecvReduce && s.src.count > 0)
      reduce_inplace(signature_.dtype, signature_.redop, address(s.dst), address(s.src),
                     s.src.count);
  }
  complete(id);
  run_ready();
}

std::string ScheduleExecutor::waiting_for() const {
  std::ostringstream out;
  int shown = 0;
  for (StepId id = 0; id < schedule_->steps.size() && shown < 4; ++id) {
    if (state_[id] != kIssued) continue;
    const Step& s = schedule_->steps[id];
    if (shown++) out << ", ";
    bool is_send = s.kind == StepKind::kSend;
    out << (is_send ? "send to rank " : "recv from rank ") << s.peer << " ("
        << bytes(is_send ? s.src : (s.kind == StepKind::kRecv ? s.dst : s.src)) << " bytes)";
  }
  if (shown == 0) out << "nothing issued (" << completed_ << "/" << schedule_->steps.size()
                      << " steps done)";
  return out.str();
}

int ScheduleExecutor::first_waited_peer() const {
  for (StepId id = 0; id < schedule_->steps.size(); ++id)
    if (state_[id] == kIssued) return schedule_->steps[id].peer;
  return -1;
}

}  // namespace plait::coll
