// The deadline allreduce's aggregator thread; see aggregator.h.
#include "coll/deadline/aggregator.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "core/log.h"
#include "core/rank_list.h"
#include "core/reduce.h"

namespace plait::deadline {
namespace {

// What a contribution may claim at most: the host's physical memory.
size_t host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : SIZE_MAX;
}

std::string shape_text(const wire::ContributionHeader& h) {
  return std::to_string(h.count) + " x " + std::string(to_string(static_cast<DataType>(h.dtype))) +
         " " + std::string(to_string(static_cast<ReduceOp>(h.op)));
}

}  // namespace

Aggregator::Aggregator(std::shared_ptr<Communicator> contributions,
                       std::shared_ptr<Communicator> results, const Options& options)
    : contributions_(std::move(contributions)),
      results_(std::move(results)),
      options_(options),
      size_(contributions_->size()),
      me_(contributions_->rank()),
      consecutive_misses_(static_cast<size_t>(size_), 0),
      gone_(static_cast<size_t>(size_), false) {
  open_step(0);
  thread_ = std::thread([this] { run(); });
}

Aggregator::~Aggregator() {
  {
    std::lock_guard lock(queue_->mu);
    stop_ = true;
    queue_->events.push_back({EventQueue::Kind::kStop, me_, 0});
  }
  queue_->cv.notify_all();
  thread_.join();
  // Receives are still posted into the steps' buffers (the next step's headers, late chunks):
  // they are cancelled before the buffers go below. Destroying a communicator cancels what
  // it has posted; if someone else still holds one, aborting it does (and returns only then).
  for (auto* comm : {&contributions_, &results_}) {
    if (comm->use_count() > 1) {
      try {
        (*comm)->abort("the deadline allreduce's aggregator closed");
      } catch (const Error& e) {
        log(LogLevel::kError, "deadline allreduce: closing: ", e.what());
      }
    }
    comm->reset();
  }
}

void Aggregator::contribute_local(const wire::ContributionHeader& header,
                                  std::vector<char> values) {
  {
    std::lock_guard lock(queue_->mu);
    local_[header.step] = {header, std::move(values)};
  }
  queue_->push({EventQueue::Kind::kLocal, me_, header.step});
}

LocalResult Aggregator::take_result(uint64_t step, std::chrono::milliseconds timeout) {
  std::unique_lock lock(queue_->mu);
  const auto until = Clock::now() + timeout;
  for (;;) {
    if (auto it = decided_.find(step); it != decided_.end()) {
      LocalResult r = std::move(it->second);
      decided_.erase(it);
      return r;
    }
    if (error_) throw *error_;
    if (result_cv_.wait_until(lock, until) == std::cv_status::timeout && !decided_.count(step) &&
        !error_)
      throw timeout_error("deadline allreduce step " + std::to_string(step) +
                              ": no result within the timeout " + std::to_string(timeout.count()) +
                              " ms (the aggregator is this rank's own thread)",
                          {.rank = me_, .op = "deadline allreduce"});
  }
}

void Aggregator::run() {
  // After kStop, the thread drains: late contributions to decided steps still arrive, and
  // every result must reach its rank before the buffers go (a peer still reads them).
  for (;;) {
    Clock::time_point wake = try_decide();
    if (draining_) wake = std::min(wake, Clock::now() + std::chrono::milliseconds(5));
    std::deque<EventQueue::Event> events;
    {
      std::unique_lock lock(queue_->mu);
      queue_->cv.wait_until(lock, wake, [&] { return !queue_->events.empty(); });
      events.swap(queue_->events);
    }
    try {
      for (const auto& e : events) {
        if (e.kind == EventQueue::Kind::kStop) begin_drain();
        else handle(e);
      }
    } catch (const Error& e) {
      fail(e);
    } catch (const std::bad_alloc&) {
      // A contribution's values that fit the host's memory but cannot be had now: every rank
      // hears why, and no exception leaves this thread (that would end the process).
      fail(invalid_usage("a contribution's values do not fit in this rank's memory "
                         "(a rank passed a count far too large?)",
                         {.rank = me_, .op = "deadline allreduce"}));
    }
    reap_sends();
    drop_done_steps();
    {
      std::lock_guard lock(queue_->mu);
      if (error_) break;
    }
    if (!draining_) continue;
    if (drained()) return;
    const auto now = Clock::now();
    const bool out_of_time = now >= drain_until_;
    if (!out_of_time && now < next_report_) continue;
    next_report_ = now + std::chrono::seconds(2);
    std::string missing;
    for (const auto& [step, st] : steps_) {
      if (step >= next_) continue;
      for (int r = 0; r < size_; ++r) {
        const Slot& slot = st.slots[static_cast<size_t>(r)];
        if (!slot.finished && !slot.closed)
          missing += " step " + std::to_string(step) + " rank " + std::to_string(r) +
                     (slot.header_work && slot.header_work->test() ? " (header in" : " (no header") +
                     (slot.has_values ? ", chunks " + std::to_string(slot.chunks_done) + "/" +
                                            std::to_string(slot.chunk_works.size())
                                      : "") +
                     ")";
      }
    }
    log(out_of_time ? LogLevel::kWarn : LogLevel::kInfo, "deadline allreduce: ",
        out_of_time ? "closed after the timeout" : "closing", ", still missing:",
        missing.empty() ? " nothing" : missing, "; ", sends_.size(), " results not yet delivered");
    if (out_of_time) return;
  }
  // Failed: nothing more can be decided; wait for the end.
  std::unique_lock lock(queue_->mu);
  queue_->cv.wait(lock, [&] { return stop_; });
}

void Aggregator::begin_drain() {
  draining_ = true;
  drain_until_ = Clock::now() + contributions_->timeout();
  next_report_ = Clock::now() + std::chrono::seconds(2);
}

bool Aggregator::drained() const {
  return sends_.empty() && (steps_.empty() || steps_.begin()->first >= next_);
}

void Aggregator::open_step(uint64_t step) {
  Step& st = steps_[step];
  st.slots.resize(static_cast<size_t>(size_));
  st.pending = size_;
  for (int r = 0; r < size_; ++r) {
    if (r == me_) continue;
    Slot& slot = st.slots[static_cast<size_t>(r)];
    if (gone_[static_cast<size_t>(r)]) {
      slot.closed = true;
      --st.pending;
      continue;
    }
    slot.header_work = contributions_->recv(slot.header.data(), slot.header.size(), DataType::kU8,
                                            r, wire::tag(step, 0));
    std::weak_ptr<EventQueue> q = queue_;
    slot.header_work->on_complete([q, r, step] {
      if (auto queue = q.lock()) queue->push({EventQueue::Kind::kHeader, r, step});
    });
  }
}

void Aggregator::handle(const EventQueue::Event& e) {
  auto it = steps_.find(e.step);
  if (it == steps_.end()) return;  // a step already closed (cannot happen: every slot counts)
  Step& st = it->second;
  Slot& slot = st.slots[static_cast<size_t>(e.rank)];
  const ErrorContext ctx{.rank = me_, .peer = e.rank, .op = "deadline allreduce",
                         .seq = static_cast<int64_t>(e.step)};
  if (slot.closed) return;
  switch (e.kind) {
    case EventQueue::Kind::kHeader: {
      if (auto err = slot.header_work->error()) {
        if (err->category() != ErrorCategory::kRemote) throw *err;
        rank_gone(e.rank, *err);
        break;
      }
      slot.parsed = wire::check_contribution(slot.header.data(), slot.header_work->bytes(), e.step,
                                             e.rank, ctx);
      check_shape(st, e.step, e.rank, slot.parsed);
      arrived(st, e.step, e.rank);
      if (!slot.has_values) {
        finish(st, slot);
        break;
      }
      const size_t elem = dtype_size(static_cast<DataType>(slot.parsed.dtype));
      const size_t bytes = slot.parsed.count * elem;  // bounded by check_contribution()
      if (bytes > host_memory_bytes())
        throw invalid_usage("rank " + std::to_string(e.rank) + "'s contribution to step " +
                                std::to_string(e.step) + " holds " + std::to_string(bytes) +
                                " bytes, more than this host's memory (a count far too large?)",
                            ctx);
      slot.values.resize(bytes);
      const wire::Chunking& k = st.chunking;
      slot.chunk_done.assign(k.chunks, 0);
      for (size_t c = 0; c < k.chunks; ++c) {
        WorkPtr w = contributions_->recv(slot.values.data() + k.begin(c) * elem,
                                         (k.end(c) - k.begin(c)) * elem, DataType::kU8, e.rank,
                                         wire::tag(e.step, c + 1));
        std::weak_ptr<EventQueue> q = queue_;
        const int r = e.rank;
        const uint64_t step = e.step;
        w->on_complete([q, r, step, c] {
          if (auto queue = q.lock()) queue->push({EventQueue::Kind::kValues, r, step, c});
        });
        slot.chunk_works.push_back(std::move(w));
      }
      return;
    }
    case EventQueue::Kind::kValues:
      if (auto err = slot.chunk_works[e.chunk]->error()) {
        if (err->category() != ErrorCategory::kRemote) throw *err;
        rank_gone(e.rank, *err);
        break;
      }
      chunk_arrived(st, e.rank, e.chunk);
      break;
    case EventQueue::Kind::kStop:
      return;  // run() takes it
    case EventQueue::Kind::kLocal: {
      {
        std::lock_guard lock(queue_->mu);
        auto local = local_.find(e.step);
        slot.parsed = local->second.first;
        slot.values = std::move(local->second.second);
        local_.erase(local);
      }
      check_shape(st, e.step, e.rank, slot.parsed);
      arrived(st, e.step, e.rank);
      slot.chunk_done.assign(st.chunking.chunks, 1);
      slot.chunks_done = slot.has_values ? st.chunking.chunks : 0;
      finish(st, slot);
      break;
    }
  }
}

void Aggregator::drop_done_steps() {
  for (auto it = steps_.begin(); it != steps_.end();) {
    Step& st = it->second;
    if (st.decided && st.pending == 0 && receives_done(st)) it = steps_.erase(it);
    else ++it;
  }
}

bool Aggregator::receives_done(Step& st) {
  for (Slot& slot : st.slots) {
    if (slot.header_work && !slot.header_work->test()) return false;
    for (WorkPtr& w : slot.chunk_works)
      if (!w->test()) return false;
  }
  return true;
}

void Aggregator::chunk_arrived(Step& st, int rank, size_t chunk) {
  Slot& slot = st.slots[static_cast<size_t>(rank)];
  // A chunk that comes after the decision is late: the step went without it.
  slot.chunk_done[chunk] = 1;
  if (++slot.chunks_done == st.chunking.chunks) finish(st, slot);
}

void Aggregator::finish(Step& st, Slot& slot) {
  slot.finished = true;
  --st.pending;
  if (st.decided) slot.values = {};  // late: nothing more will read or write it
}

double Aggregator::missing_share(const Step& st) const {
  if (!st.shape || st.shape->count == 0) return 0;
  size_t expected = 0, missing = 0;
  const wire::Chunking& k = st.chunking;
  for (int r = 0; r < size_; ++r) {
    const Slot& slot = st.slots[static_cast<size_t>(r)];
    if (gone_[static_cast<size_t>(r)] || (slot.present && !slot.has_values)) continue;
    ++expected;
    if (!slot.present) {
      missing += k.count;
      continue;
    }
    for (size_t c = 0; c < k.chunks; ++c)
      if (!slot.chunk_done[c]) missing += k.end(c) - k.begin(c);
  }
  return expected == 0 ? 0 : static_cast<double>(missing) / (static_cast<double>(expected) * k.count);
}

void Aggregator::rank_gone(int rank, const Error& why) {
  if (gone_[static_cast<size_t>(rank)]) return;
  gone_[static_cast<size_t>(rank)] = true;
  // Expected while draining (the ranks finish and leave); news in the middle of training.
  log(draining_ ? LogLevel::kDebug : LogLevel::kWarn, "deadline allreduce: rank ", rank,
      " is gone (", why.what(), "); the steps go on without it");
  for (auto& [step, st] : steps_) {
    Slot& slot = st.slots[static_cast<size_t>(rank)];
    if (!slot.finished && !slot.closed) {
      slot.closed = true;
      --st.pending;
    }
  }
}

void Aggregator::check_shape(Step& st, uint64_t step, int rank, const wire::ContributionHeader& h) {
  if (!st.shape) {
    st.shape = h;
    st.shape_from = rank;
    const size_t elem = dtype_size(static_cast<DataType>(h.dtype));
    st.chunking = wire::chunking(h.count, elem, options_.chunk_bytes);
    if (st.chunking.chunks > wire::kMaxChunks)
      throw invalid_usage("chunk_bytes " + std::to_string(options_.chunk_bytes) + " cuts " +
                              std::to_string(h.count) + " values into more than " +
                              std::to_string(wire::kMaxChunks) + " chunks",
                          {.rank = me_, .op = "deadline allreduce", .seq = static_cast<int64_t>(step)});
    return;
  }
  if (st.shape->count == h.count && st.shape->dtype == h.dtype && st.shape->op == h.op) return;
  throw invalid_usage("deadline allreduce step " + std::to_string(step) + " differs across ranks: rank " +
                          std::to_string(rank) + " passed " + shape_text(h) + ", rank " +
                          std::to_string(st.shape_from) + " passed " + shape_text(*st.shape),
                      {.rank = me_, .peer = rank, .op = "deadline allreduce",
                       .seq = static_cast<int64_t>(step)});
}

void Aggregator::arrived(Step& st, uint64_t step, int rank) {
  Slot& slot = st.slots[static_cast<size_t>(rank)];
  slot.has_values = !(slot.parsed.flags & wire::kNoValues);
  if (st.decided) {
    // Late: its step went without it; with kCarry the rank itself adds it to its next one.
    log(LogLevel::kDebug, "deadline allreduce: rank ", rank, "'s contribution to step ", step,
        " came ", seconds_since(last_result_) * 1e3, " ms after a later step's result");
    return;
  }
  slot.present = true;
  if (st.present++ == 0) st.first = Clock::now();
}

Clock::time_point Aggregator::try_decide() {
  for (;;) {
    Step& st = steps_[next_];
    if (st.slots.empty()) open_step(next_);
    if (st.present == 0) return Clock::time_point::max();
    const Clock::time_point start =
        options_.from == DeadlineFrom::kStepStart && next_ > 0 ? last_result_ : st.first;
    const Clock::time_point due = start + options_.deadline;
    const auto now = Clock::now();
    int here = 0, finished = 0;  // not gone; present with every chunk (or without values)
    for (int r = 0; r < size_; ++r) {
      if (gone_[static_cast<size_t>(r)]) continue;
      ++here;
      const Slot& slot = st.slots[static_cast<size_t>(r)];
      finished += slot.present && slot.finished ? 1 : 0;
    }
    const double missing = missing_share(st);
    const bool bounded = missing <= options_.max_dropped;
    const bool everyone = finished >= here;
    // Backup workers and min_contributors count whole contributions (every chunk here).
    const bool enough = options_.backup > 0 && finished >= size_ - options_.backup && bounded;
    const bool late = now >= due && finished >= options_.min_contributors && bounded;
    if (!(everyone || enough || late)) {
      if (now < due) return due;
      if (now >= due + contributions_->timeout()) {
        fail(timeout_error(
            "deadline allreduce step " + std::to_string(next_) + ": " + std::to_string(finished) +
                " of " + std::to_string(size_) + " contributions whole (" +
                std::to_string(options_.min_contributors) + " needed) and " +
                std::to_string(missing * 100) + " % of the values missing (" +
                std::to_string(options_.max_dropped * 100) +
                " % allowed) after the deadline and the timeout",
            {.rank = me_, .op = "deadline allreduce", .seq = static_cast<int64_t>(next_)}));
        return Clock::time_point::max();
      }
      return due + contributions_->timeout();  // arrivals wake us sooner
    }
    try {
      decide(st, next_, missing);
    } catch (const Error& e) {
      fail(e);
      return Clock::time_point::max();
    }
    if (st.pending == 0) steps_.erase(next_);
    ++next_;
  }
}

void Aggregator::decide(Step& st, uint64_t step, double missing) {
  const auto& shape = *st.shape;
  const auto dtype = static_cast<DataType>(shape.dtype);
  const auto op = static_cast<ReduceOp>(shape.op);
  const size_t elem = dtype_size(dtype);
  const wire::Chunking& k = st.chunking;
  const size_t words = wire::mask_words(size_);
  wire::ResultHeader header;
  header.step = step;
  header.count = shape.count;
  header.dropped_ppm = static_cast<uint64_t>(missing * 1e6 + 0.5);
  header.contributors.assign(words, 0);
  header.slow.assign(words, 0);
  header.present.assign(words, 0);
  if (k.chunks > 1) header.chunks.assign(k.chunks * words, 0);
  for (int r = 0; r < size_; ++r) {
    const Slot& slot = st.slots[static_cast<size_t>(r)];
    if (slot.present) {
      // On time (with values, only joined, or with chunks still on the way).
      consecutive_misses_[static_cast<size_t>(r)] = 0;
      wire::set_bit(header.present, r);
      if (slot.has_values && slot.chunks_done == k.chunks) wire::set_bit(header.contributors, r);
    } else if (!gone_[static_cast<size_t>(r)] &&
               ++consecutive_misses_[static_cast<size_t>(r)] == options_.report_after) {
      log(LogLevel::kWarn, "deadline allreduce: rank ", r, " missed the deadline of ",
          options_.report_after, " steps in a row (up to step ", step, ")");
    }
  }
  // Chunk by chunk, in rank order whatever the arrival order: the result depends only on
  // which chunks are in. Late chunks may still land in their slots, so nothing is moved.
  auto values = std::make_shared<std::vector<char>>(shape.count * elem, 0);
  for (size_t c = 0; c < k.chunks; ++c) {
    const size_t at = k.begin(c) * elem, n = k.end(c) - k.begin(c);
    int in = 0;
    for (int r = 0; r < size_; ++r) {
      const Slot& slot = st.slots[static_cast<size_t>(r)];
      if (!slot.present || !slot.has_values || !slot.chunk_done[c]) continue;
      if (k.chunks > 1) wire::set_bit(header.chunks, static_cast<int>(c * words * 64) + r);
      if (in++ == 0) std::memcpy(values->data() + at, slot.values.data() + at, n * elem);
      else reduce_inplace(dtype, op, values->data() + at, slot.values.data() + at, n);
    }
    if (op == ReduceOp::kAvg && in > 0) scale_divide(dtype, values->data() + at, n, in);
  }
  for (auto& slot : st.slots)
    if (slot.finished) slot.values = {};
  for (int r = 0; r < size_; ++r)
    if (consecutive_misses_[static_cast<size_t>(r)] >= options_.report_after) wire::set_bit(header.slow, r);
  st.decided = true;
  last_result_ = Clock::now();
  if (log_enabled(LogLevel::kDebug))
    log(LogLevel::kDebug, "deadline allreduce step ", step, ": contributors [",
        rank_list(wire::ranks_of(header.contributors, size_)), "] of ", size_, ", ", missing * 100,
        " % of the values missing");

  auto encoded = std::make_shared<std::vector<char>>();
  header.encode(*encoded, size_);
  PendingSend send{encoded, values, {}};
  for (int r = 0; r < size_; ++r) {
    if (r == me_ || gone_[static_cast<size_t>(r)]) continue;
    send.works.emplace_back(r, results_->send(encoded->data(), encoded->size(), DataType::kU8, r,
                                              wire::tag(step, 0)));
    send.works.emplace_back(r, results_->send(values->data(), values->size(), DataType::kU8, r,
                                              wire::tag(step, 1)));
  }
  sends_.push_back(std::move(send));
  {
    std::lock_guard lock(queue_->mu);
    decided_[step] = LocalResult{header, values};
  }
  result_cv_.notify_all();
  open_step(step + 1);
}

void Aggregator::reap_sends() {
  while (!sends_.empty()) {
    auto& front = sends_.front();
    for (auto& [rank, w] : front.works) {
      if (!w->test()) return;
      if (auto err = w->error()) {
        if (err->category() != ErrorCategory::kRemote) {
          fail(*err);
          return;
        }
        rank_gone(rank, *err);
      }
    }
    sends_.pop_front();
  }
}

void Aggregator::fail(const Error& e) {
  {
    std::lock_guard lock(queue_->mu);
    if (error_) return;
    error_ = std::make_shared<const Error>(e);
  }
  log(LogLevel::kError, e.what());
  // The other ranks wait on these communicators: the abort tells them why.
  contributions_->abort(e.what());
  results_->abort(e.what());
  result_cv_.notify_all();
}

}  // namespace plait::deadline
