#include "transport/tcp/matcher.h"

namespace plait::transport::tcp {
namespace {

bool accepts(const Op& recv, int source, uint64_t tag) {
  int want = recv.peer.load(std::memory_order_relaxed);
  return recv.tag == tag && (want == kAnySource || want == source);
}

}  // namespace

Matcher::Arrival Matcher::arrive(int source, uint64_t tag, uint64_t header, uint64_t length,
                                 bool rendezvous, uint64_t sender_op) {
  std::lock_guard lock(mu_);
  for (auto it = posted_.begin(); it != posted_.end();) {
    OpRef& recv = *it;
    if (recv->done()) {  // cancelled or failed: drop it on the way
      it = posted_.erase(it);
      continue;
    }
    if (accepts(*recv, source, tag)) {
      OpRef matched = std::move(recv);
      posted_.erase(it);
      matched->peer.store(source, std::memory_order_relaxed);
      matched->message_length.store(length, std::memory_order_relaxed);
      matched->message_header.store(header, std::memory_order_relaxed);
      return {std::move(matched), nullptr};
    }
    ++it;
  }
  auto entry = std::make_shared<Unexpected>();
  entry->source = source;
  entry->tag = tag;
  entry->header = header;
  entry->length = length;
  entry->rendezvous = rendezvous;
  entry->sender_op = sender_op;
  unexpected_.push_back(entry);
  return {nullptr, std::move(entry)};
}

Matcher::Posted Matcher::post(const OpRef& recv) {
  std::lock_guard lock(mu_);
  int want = recv->peer.load(std::memory_order_relaxed);
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    const UnexpectedRef& e = *it;
    if (e->tag != recv->tag || (want != kAnySource && want != e->source)) continue;
    UnexpectedRef match = std::move(*it);
    unexpected_.erase(it);
    recv->peer.store(match->source, std::memory_order_relaxed);
    recv->message_length.store(match->length, std::memory_order_relaxed);
    recv->message_header.store(match->header, std::memory_order_relaxed);
    bool complete = match->rendezvous || match->complete;
    if (!complete) match->claimed_by = recv;
    return {std::move(match), complete};
  }
  posted_.push_back(recv);
  return {};
}

OpRef Matcher::payload_complete(const UnexpectedRef& entry) {
  std::lock_guard lock(mu_);
  entry->complete = true;
  return std::move(entry->claimed_by);
}

void Matcher::purge_finished() {
  std::lock_guard lock(mu_);
  posted_.remove_if([](const OpRef& op) { return op->done(); });
}

void Matcher::drop_incomplete_from(int source) {
  std::lock_guard lock(mu_);
  unexpected_.remove_if([&](const UnexpectedRef& e) {
    return e->source == source && (e->rendezvous || !e->complete);
  });
}

}  // namespace plait::transport::tcp
