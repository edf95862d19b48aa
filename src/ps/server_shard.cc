// The server's arithmetic and its consistency rules: a push taken from its ring slot into a
// shard (aggregated for a BSP round, or applied at once under ASP and SSP), rounds applied,
// pulls answered when their consistency condition holds, and pulls that never can be failed
// with the reason. All on the completion thread, under mu_.
#include <algorithm>

#include "core/log.h"
#include "core/reduce.h"
#include "ps/server.h"
#include "ps/update_kernels.h"

namespace plait::ps {

void PsServer::on_push(int worker, uint32_t slot, uint32_t partition, size_t bytes) {
  Shard* s = partition < shards_.size() ? shards_[partition].get() : nullptr;
  if (!s || bytes != s->bytes) {
    log(LogLevel::kError, "ps server rank ", rank_, ": a push of ", bytes, " bytes for partition ",
        partition, " from worker rank ", service_.workers[worker], " does not match any shard here");
    release_slot(worker, slot);
    return;
  }
  stats_.pushes += 1;
  stats_.bytes_pushed += bytes;
  // A worker's pushes of one shard are taken in its order: one behind a push of the same
  // worker that has to wait waits too. Other workers' pushes go past it (the push a held one
  // waits for, its round's, may be among them).
  const bool behind_own = std::any_of(s->held.begin(), s->held.end(),
                                      [&](const Held& h) { return h.worker == worker; });
  if (behind_own || !absorb(*s, worker, slot)) {
    s->held.push_back({worker, slot});
    stats_.deferred += 1;
    return;
  }
  after_change(*s);
}

bool PsServer::absorb(Shard& s, int worker, uint32_t slot) {
  const std::byte* data = slot_data(worker, slot);
  if (service_.consistency == Consistency::kBsp) {
    // Backup workers: a push of a round applied without it is late.
    if (s.taken[worker] < s.rounds) {
      if (service_.fold_late) {
        if (s.late.size() == 0) s.late = AlignedBuffer(s.count * dtype_size(acc_type(s.dtype)));
        if (s.folded++ == 0) load_into(s.dtype, s.late.data(), data, s.count);
        else add_into(s.dtype, s.late.data(), data, s.count);
      } else {
        s.dropped += 1;
      }
      s.taken[worker] += 1;
      release_slot(worker, slot);
      return true;
    }
    // The worker's next round, or a round whose result is not applied yet: later.
    if (s.in_round[worker] || s.round_complete) return false;
    const bool same_type = acc_type(s.dtype) == s.dtype;
    if (s.contributors == 0 && service_.round_size() > 1 && same_type &&
        parked_[worker] + 1 < service_.slots) {
      s.first = Held{worker, slot};  // stays in its slot until the second push comes
      parked_[worker] += 1;
    } else if (s.first) {
      reduce_into(s.dtype, ReduceOp::kSum, s.accum.data(), slot_data(s.first->worker, s.first->slot),
                  data, s.count);
      release_slot(s.first->worker, s.first->slot);
      parked_[s.first->worker] -= 1;
      s.first.reset();
      release_slot(worker, slot);
    } else {
      if (s.contributors == 0)
        load_into(s.dtype, s.accum.data(), data, s.count);
      else
        add_into(s.dtype, s.accum.data(), data, s.count);
      release_slot(worker, slot);
    }
    s.in_round[worker] = 1;
    s.contributors += 1;
    s.pushes[worker] += 1;
    s.taken[worker] += 1;
    if (s.contributors == service_.round_size()) {
      s.round_complete = true;
      if (s.replies_in_flight == 0) apply_round(s);
    }
    return true;
  }
  // ASP and SSP apply every push at once, but never under a reply being written.
  if (s.replies_in_flight > 0) return false;
  const Rule rule = s.update.rule;
  const bool converted = acc_type(s.dtype) != s.dtype || rule == Rule::kMean;
  const void* gradient = data;
  if (converted) {
    load_into(s.dtype, s.accum.data(), data, s.count);
    if (rule == Rule::kMean) divide(s.dtype, s.accum.data(), s.count, service_.num_workers());
    gradient = s.accum.data();
  }
  s.steps += 1;
  apply_rule(s.dtype, s.update, s.master.data(), gradient, {s.m.data(), s.v.data()}, s.count, s.steps);
  if (s.serve.size()) store_from(s.dtype, s.serve.data(), s.master.data(), s.count);
  s.pushes[worker] += 1;
  // check_health() counts a finished worker's pushes here in every mode: left at 0, an SSP
  // pull that waited a moment (behind held pushes) failed as "can never be answered".
  s.taken[worker] += 1;
  release_slot(worker, slot);
  return true;
}

void PsServer::apply_round(Shard& s) {
  // The round's pushes, and with fold_late the late ones taken since the last round.
  int workers = s.contributors;
  if (s.folded > 0) {
    reduce_inplace(acc_type(s.dtype), ReduceOp::kSum, s.accum.data(), s.late.data(), s.count);
    workers += s.folded;
    s.folded = 0;
  }
  switch (s.update.rule) {
    case Rule::kSum:
      s.master.swap(s.accum);  // the round's sum is the new value: no copy
      break;
    case Rule::kMean:
      s.master.swap(s.accum);
      divide(s.dtype, s.master.data(), s.count, workers);
      break;
    default:
      // The optimizers step once per round, with the mean gradient.
      divide(s.dtype, s.accum.data(), s.count, workers);
      s.steps += 1;
      apply_rule(s.dtype, s.update, s.master.data(), s.accum.data(), {s.m.data(), s.v.data()},
                 s.count, s.steps);
  }
  if (s.serve.size()) store_from(s.dtype, s.serve.data(), s.master.data(), s.count);
  s.rounds += 1;
  std::fill(s.in_round.begin(), s.in_round.end(), 0);
  s.contributors = 0;
  s.round_complete = false;
}

void PsServer::after_change(Shard& s) {
  // Held pushes in arrival order, each worker's in its own order: a push that still has to
  // wait blocks its worker's later ones only. Absorbing one may complete a round, which lets
  // earlier ones in: go again until nothing moves.
  std::vector<char> blocked(service_.num_workers());
  for (bool moved = true; moved && !s.held.empty();) {
    moved = false;
    std::fill(blocked.begin(), blocked.end(), 0);
    for (auto it = s.held.begin(); it != s.held.end();) {
      if (!blocked[it->worker] && absorb(s, it->worker, it->slot)) {
        it = s.held.erase(it);
        moved = true;
      } else {
        blocked[it->worker] = 1;
        ++it;
      }
    }
  }
  for (size_t i = 0; i < s.waiting.size();) {
    if (may_answer(s, s.waiting[i])) {
      reply(s, s.waiting[i]);
      s.waiting.erase(s.waiting.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

uint64_t PsServer::version(const Shard& s) const {
  if (service_.consistency == Consistency::kBsp) return s.rounds;
  return *std::min_element(s.pushes.begin(), s.pushes.end());
}

bool PsServer::may_answer(const Shard& s, const Pull& p) const {
  const uint64_t clock = p.request.clock;
  switch (service_.consistency) {
    case Consistency::kBsp: return s.rounds >= clock;
    case Consistency::kAsp: return s.held.empty();
    case Consistency::kSsp: {
      // Held pushes go first: a pull after them sees them.
      const auto s_bound = static_cast<uint64_t>(service_.staleness);
      return s.held.empty() && (clock <= s_bound || version(s) >= clock - s_bound);
    }
  }
  return false;
}

void PsServer::on_pull(int worker, const wire::PullRequest& request) {
  Shard* s = request.partition < shards_.size() ? shards_[request.partition].get() : nullptr;
  Pull p{worker, request, std::chrono::steady_clock::now()};
  if (!s) {
    fail_pull(p, ErrorCategory::kInvalidUsage,
              "partition " + std::to_string(request.partition) + " is not on server rank " +
                  std::to_string(rank_));
    return;
  }
  if (may_answer(*s, p)) {
    reply(*s, p);
  } else {
    s->waiting.push_back(p);
  }
}

void PsServer::reply(Shard& s, const Pull& p) {
  const uint64_t id = next_reply_++;
  const auto imm = static_cast<uint32_t>(version(s));  // the worker restores the high bits
  replies_.emplace(id, p);
  s.replies_in_flight += 1;
  stats_.pulls += 1;
  stats_.bytes_pulled += s.bytes;
  try {
    fabric_.write(service_.workers[p.worker], s.reply_source(), s.bytes, p.request.dest,
                  p.request.dest_offset, imm, *cq_, ctx(Ctx::kReply, id));
  } catch (const Error& e) {  // a bad descriptor from the worker: tell it
    replies_.erase(id);
    s.replies_in_flight -= 1;
    fail_pull(p, e.category(), e.message());
  }
}

void PsServer::on_reply_done(const rdma::Completion& c) {
  auto it = replies_.find(ctx_id(c.context));
  if (it == replies_.end()) return;
  const Pull p = it->second;
  replies_.erase(it);
  Shard& s = *shards_[p.request.partition];
  s.replies_in_flight -= 1;
  if (!c.ok()) {
    // The worker refused the write (a bad buffer) or is gone; if it lives, it hears why.
    fail_pull(p, c.error->category(), "the reply write failed: " + c.error->message());
  }
  if (s.replies_in_flight == 0) {
    if (s.round_complete) apply_round(s);
    after_change(s);
  }
}

void PsServer::check_health() {
  const int workers = service_.num_workers();
  for (int w = 0; w < workers; ++w) {
    if (done_[w] || !failed_[w].empty()) continue;
    const int rank = service_.workers[w];
    if (fabric_.peer_failed(rank)) {
      failed_[w] = "worker rank " + std::to_string(rank) + " is gone: " + fabric_.peer_failure(rank);
      log(LogLevel::kError, "ps server rank ", rank_, ": ", failed_[w]);
      workers_changed_.notify_all();
    }
  }
  const auto now = std::chrono::steady_clock::now();
  for (auto& owned : shards_) {
    if (!owned) continue;
    Shard& s = *owned;
    for (size_t i = 0; i < s.waiting.size();) {
      const Pull& p = s.waiting[i];
      // Pushes of which workers it waits for: BSP needs round `clock` complete, SSP needs
      // every worker at clock - s at least.
      uint64_t need = 0;
      if (service_.consistency == Consistency::kBsp) need = p.request.clock;
      if (service_.consistency == Consistency::kSsp && p.request.clock > static_cast<uint64_t>(service_.staleness))
        need = p.request.clock - static_cast<uint64_t>(service_.staleness);
      std::string missing, gone;
      int gone_count = 0;
      for (int w = 0; w < workers; ++w) {
        if (s.taken[w] >= need) continue;
        missing += ' ';
        missing += std::to_string(service_.workers[w]);
        if (!failed_[w].empty())
          gone += (gone.empty() ? "" : "; ") + failed_[w];
        else if (done_[w])
          gone += (gone.empty() ? "" : "; ") + std::string("worker rank ") +
                  std::to_string(service_.workers[w]) + " finished after " +
                  std::to_string(s.taken[w]) + " pushes of it";
        else
          continue;
        ++gone_count;
      }
      const std::string what = "pull of " + s.label + " at clock " + std::to_string(p.request.clock);
      // With backup workers a round goes on without up to backup_workers of them.
      if (gone_count > (service_.consistency == Consistency::kBsp ? service_.backup_workers : 0)) {
        fail_pull(p, ErrorCategory::kRemote, what + " can never be answered: " + gone);
      } else if (now - p.since > service_.timeout) {
        fail_pull(p, ErrorCategory::kTimeout,
                  what + " waited " + std::to_string(service_.timeout.count()) +
                      " ms; still missing pushes from worker ranks" + missing);
      } else {
        ++i;
        continue;
      }
      s.waiting.erase(s.waiting.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
}

}  // namespace plait::ps
