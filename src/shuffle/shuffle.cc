// A round of the shuffle: block locations, the transfers (shuffle_fetch.cc for pull,
// shuffle_push.cc for push), the end of the round; and the waits every step goes through.
#include <algorithm>
#include <cstring>

#include "plait/error.h"
#include "shuffle/shuffle_impl.h"

namespace plait::shuffle {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

rdma::Completion Shuffle::Impl::wait_one(const std::string& waiting_for) {
  // The timeout counts from the last completion: a long round is fine, a stalled one is not.
  rdma::Completion c;
  if (!cq_->wait(&c, std::chrono::duration_cast<std::chrono::microseconds>(fabric_.timeout())))
    throw timeout_error("round " + std::to_string(round_) + ": waited " +
                            std::to_string(fabric_.timeout().count()) + " ms for " + waiting_for,
                        {.rank = rank_, .op = "shuffle"});
  if (!c.ok()) fail(c);
  return c;
}

rdma::Completion Shuffle::Impl::next(const std::string& waiting_for) {
  for (;;) {
    rdma::Completion c = wait_one(waiting_for);
    if (!serve(c)) return c;
  }
}

void Shuffle::Impl::fail(const rdma::Completion& c) {
  const int peer = ctx_peer(c.context);
  const uint64_t from = peer < static_cast<int>(from_bytes_.size()) ? from_bytes_[peer] : 0;
  std::string what;
  switch (ctx_op(c.context)) {
    case Op::kLocationIn: what = "the locations of its blocks from mapper " + std::to_string(peer); break;
    case Op::kTargetIn: what = "where to write its blocks, from reducer " + std::to_string(peer); break;
    case Op::kDoneIn: what = "the end of the round from rank " + std::to_string(peer); break;
    case Op::kSend: what = "a message to rank " + std::to_string(peer); break;
    case Op::kAsked: what = "a read request or credit to mapper " + std::to_string(peer); break;
    case Op::kRead: what = "reading " + block_text(peer, from); break;
    case Op::kData: what = "reading the spilled part of " + block_text(peer, from); break;
    case Op::kWrite:
      what = "writing its blocks of partition " + std::to_string(peer) + " (" +
             std::to_string(part_bytes_[peer]) + " bytes) to reducer " + std::to_string(peer);
      break;
    case Op::kRequestIn: what = "read requests for its spill file from reducer " + std::to_string(peer); break;
    case Op::kServed: what = "sending spilled records to reducer " + std::to_string(peer); break;
    case Op::kCreditIn: what = "credits from reducer " + std::to_string(peer); break;
    case Op::kPushed:
      what = "writing records of partition " + std::to_string(peer) + " into a window of reducer " +
             std::to_string(peer);
      break;
    case Op::kNotified: what = "telling reducer " + std::to_string(peer) + " a window is written"; break;
    case Op::kWritten: what = "waiting for " + block_text(peer, from) + " to be written"; break;
  }
  throw Error(c.error->category(),
              "round " + std::to_string(round_) + ": " + what + ": " + c.error->message(),
              {.rank = rank_, .peer = peer, .op = "shuffle"});
}

std::string Shuffle::Impl::block_text(int mapper, uint64_t bytes) const {
  return "the block of partition " + std::to_string(rank_) + " on mapper " +
         std::to_string(mapper) + " (" + std::to_string(bytes) + " bytes)";
}

void Shuffle::Impl::begin_round() {
  from_.assign(size_, {});
  from_bytes_.assign(size_, 0);
  request_queue_.assign(size_, {});
  requests_out_.assign(size_, 0);
  fetches_ = 0;
  if (spill_ || credited()) post_serving();
}

void Shuffle::Impl::send_locations() {
  // Posted receives first: a peer's message then lands straight in from_.
  int expected = 0;
  for (int m = 0; m < size_; ++m) {
    if (m == rank_) continue;
    from_[m].assign(Shuffle::kMaxRuns + 1, BlockWire{});
    fabric_.recv(m, from_[m].data(), from_[m].size() * sizeof(BlockWire), tag(MsgKind::kLocation),
                 *cq_, ctx(Op::kLocationIn, m));
    ++expected;
  }
  // Our blocks for each reducer: a header, then the run's non-empty segments.
  own_.assign(size_, {});
  own_src_.assign(size_, {});
  own_data_.clear();
  for (int r = 0; r < size_; ++r) {
    own_[r].push_back(BlockWire{});
    own_src_[r].push_back(nullptr);
    for (const Run& run : runs_) {
      if (run.bytes[r] == 0) continue;
      own_src_[r].push_back(run.spilled ? nullptr : run_data(run) + run.offset[r]);
      if (r == rank_) own_data_.push_back(own_src_[r].back());
      BlockWire b;
      if (run.spilled) {
        b.offset = run.file_offset + run.offset[r];
        b.in_file = 1;
      } else {
        const rdma::RemoteKey key = run.region->remote_key();
        b.addr = key.addr;
        b.length = key.length;
        b.key = key.key;
        b.offset = run.offset[r];
      }
      b.bytes = run.bytes[r];
      own_[r].push_back(b);
    }
    own_[r][0].offset = own_[r].size() - 1;
    own_[r][0].bytes = part_bytes_[r];
    if (r == rank_) continue;
    fabric_.send(r, own_[r].data(), own_[r].size() * sizeof(BlockWire), tag(MsgKind::kLocation), 0,
                 *cq_, ctx(Op::kSend, r));
    ++expected;
  }
  from_[rank_].assign(own_[rank_].begin() + 1, own_[rank_].end());
  from_bytes_[rank_] = part_bytes_[rank_];
  std::vector<uint8_t> have(size_, 0);
  while (expected > 0) {
    std::string waiting;
    for (int m = 0; m < size_; ++m)
      if (m != rank_ && !have[m]) {
        waiting = "the locations of its blocks from mapper " + std::to_string(m);
        break;
      }
    rdma::Completion c = next(waiting.empty() ? "its location messages to be sent" : waiting);
    if (ctx_op(c.context) == Op::kLocationIn) {
      const int m = ctx_peer(c.context);
      const Locations got = check_locations(from_[m].data(), c.bytes, options_.record_bytes, m, rank_);
      from_bytes_[m] = got.total;
      from_[m].erase(from_[m].begin());
      from_[m].resize(got.blocks);
      have[m] = 1;
    } else if (ctx_op(c.context) != Op::kSend) {
      continue;  // not one of this phase's messages
    }
    --expected;
  }
}

uint64_t Shuffle::Impl::partition_bytes() const { return partition_total(from_bytes_, rank_); }

void Shuffle::Impl::finish_round() {
  // pull: tell every mapper we are done with its blocks, and wait until every reducer is done
  // with ours (serving its spill reads meanwhile) before the runs go.
  std::vector<uint64_t> in(size_), out(size_, round_);
  CancelOnThrow cancel_first(*this);
  int expected = 0;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    fabric_.recv(p, &in[p], sizeof(uint64_t), tag(MsgKind::kDone), *cq_, ctx(Op::kDoneIn, p));
    fabric_.send(p, &out[p], sizeof(uint64_t), tag(MsgKind::kDone), 0, *cq_, ctx(Op::kSend, p));
    expected += 2;
  }
  std::vector<uint8_t> have(size_, 0);
  while (expected > 0) {
    std::string waiting = "its done messages to be sent";
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && !have[p]) {
        waiting = "rank " + std::to_string(p) + " to finish reading its blocks of partition " +
                  std::to_string(p) + " (" + std::to_string(part_bytes_[p]) + " bytes)";
        break;
      }
    rdma::Completion c = next(waiting);
    if (ctx_op(c.context) == Op::kDoneIn) have[ctx_peer(c.context)] = 1;
    else if (ctx_op(c.context) != Op::kSend) continue;  // not one of this phase's messages
    --expected;
  }
  // Spilled records still on their way out: their staging buffers stay until sent; and our
  // own read requests' sends, which the mappers answered already.
  while (serving_ > 0 || asks_out_ > 0)
    serve(wait_one(serving_ > 0 ? "spilled records to be sent" : "its read requests to be sent"));
}

void Shuffle::Impl::end_round() {
  // Left posted: the receives for read requests and credits (no other operation is pending).
  if (!request_in_.empty() || !credit_in_.empty()) cancel_pending();
  request_in_.clear();
  credit_in_.clear();
  push_queue_.clear();
  pushing_.clear();
  pushing_free_.clear();
  windows_region_.reset();
  windows_base_ = nullptr;
  windows_ = Buffer();
  serve_queue_.clear();
  serve_buffer_.clear();
  serve_free_.clear();
  serving_ = 0;
  asks_out_ = 0;
  runs_.clear();
  held_bytes_ = 0;
  spill_.reset();
  part_bytes_.assign(size_, 0);
  ++round_;
}

void Shuffle::Impl::cancel_pending() {
  fabric_.cancel(*cq_);
  rdma::Completion drained;
  while (cq_->poll(&drained)) {
  }
}

template <typename Body>
auto Shuffle::Impl::guarded(Body body) -> decltype(body()) {
  try {
    return body();
  } catch (...) {
    // Receives, reads and writes of this round may still be posted into buffers: the fabric
    // fails them all, and from cancel()'s return writes nothing more into them. Those in
    // the body's locals (the partition being filled, the push round's messages) were
    // cancelled already, by a CancelOnThrow declared after them, before they went. The round
    // is over; the next starts clean, its messages tagged apart from this one's leftovers.
    cancel_pending();
    request_in_.clear();
    credit_in_.clear();
    end_round();
    throw;
  }
}

Buffer Shuffle::Impl::exchange() {
  return guarded([&] {
    const auto start = Clock::now();
    begin_round();
    send_locations();
    const uint64_t total = partition_bytes();
    Buffer out(total);
    CancelOnThrow cancel_first(*this);
    for (int r = 0; r < size_; ++r)
      if (r != rank_) stats_.bytes_sent += part_bytes_[r];
    if (options_.key_bytes > 0) {  // pulled or pushed, a window at a time
      uint64_t at = 0;
      merge_fetched([&](const uint8_t* records, size_t count) {
        std::memcpy(out.data() + at, records, count * options_.record_bytes);
        at += count * options_.record_bytes;
      });
      finish_round();
    } else if (options_.mode == ShuffleMode::kPull) {
      receive_pull(out);
      finish_round();
    } else {
      std::vector<uint64_t> at(size_, 0);
      for (int m = 1; m < size_; ++m) at[m] = at[m - 1] + from_bytes_[m - 1];
      push_round(out, at);
    }
    end_round();
    stats_.records_received += total / options_.record_bytes;
    stats_.exchange_s += since(start);
    return out;
  });
}

void Shuffle::Impl::exchange(const Sink& sink) {
  if (options_.mode == ShuffleMode::kPush && options_.key_bytes == 0) {
    // Push without a key lands the partition whole in our memory; the sink then reads it
    // from there.
    Buffer whole = exchange();
    if (!whole.empty()) sink(whole.data(), whole.size() / options_.record_bytes);
    return;
  }
  guarded([&] {
    const auto start = Clock::now();
    begin_round();
    send_locations();
    for (int r = 0; r < size_; ++r)
      if (r != rank_) stats_.bytes_sent += part_bytes_[r];
    const uint64_t total = partition_bytes();
    merge_fetched(sink);  // without a key, the blocks in mapper order
    finish_round();
    end_round();
    stats_.records_received += total / options_.record_bytes;
    stats_.exchange_s += since(start);
  });
}

Shuffle::Shuffle(rdma::Fabric& fabric, ShuffleOptions options)
    : impl_(std::make_unique<Impl>(fabric, std::move(options))) {}
Shuffle::~Shuffle() = default;
void Shuffle::map(const void* records, size_t count,
                  const std::function<int(const uint8_t*)>& partition_of) {
  impl_->map(records, count, partition_of);
}
void Shuffle::map(Buffer records, const std::function<int(const uint8_t*)>& partition_of) {
  impl_->map(std::move(records), partition_of);
}
Buffer Shuffle::exchange() { return impl_->exchange(); }
void Shuffle::exchange(const Sink& sink) { impl_->exchange(sink); }
const ShuffleStats& Shuffle::stats() const { return impl_->stats(); }

}  // namespace plait::shuffle
