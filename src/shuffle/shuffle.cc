#include <algorithm>
#include <cstring>
#include <deque>

#include "plait/error.h"
#include "shuffle/shuffle_impl.h"

namespace plait::shuffle {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

Shuffle::Impl::Impl(rdma::Fabric& fabric, ShuffleOptions options)
    : fabric_(fabric), options_(options), rank_(fabric.rank()), size_(fabric.size()),
      cq_(fabric.create_cq()) {
  if (options_.record_bytes == 0) throw invalid_usage("shuffle: record_bytes must be positive");
  if (options_.fetch_bytes < options_.record_bytes) options_.fetch_bytes = options_.record_bytes;
  if (options_.in_flight < 1) options_.in_flight = 1;
}

Shuffle::Impl::~Impl() = default;

void Shuffle::Impl::map(const void* records, size_t count,
                        const std::function<int(const uint8_t*)>& partition_of) {
  if (mapped_) throw invalid_usage("shuffle: map() twice in one round; exchange() first");
  const auto start = Clock::now();
  const auto* in = static_cast<const uint8_t*>(records);
  const size_t rb = options_.record_bytes;
  // Counting pass: each record's partition, once.
  std::vector<uint32_t> part(count);
  std::vector<uint64_t> counts(size_, 0);
  for (size_t i = 0; i < count; ++i) {
    const int p = partition_of(in + i * rb);
    if (p < 0 || p >= size_)
      throw invalid_usage("record " + std::to_string(i) + " mapped to partition " +
                              std::to_string(p) + ", not one of 0.." + std::to_string(size_ - 1),
                          {.rank = rank_, .op = "shuffle map"});
    part[i] = static_cast<uint32_t>(p);
    ++counts[p];
  }
  part_offset_.assign(size_, 0);
  part_bytes_.assign(size_, 0);
  uint64_t total = 0;
  for (int p = 0; p < size_; ++p) {
    part_offset_[p] = total;
    part_bytes_[p] = counts[p] * rb;
    total += part_bytes_[p];
  }
  map_region_.reset();
  if (total > 0) {
    map_region_ = fabric_.allocate_memory(total, rdma::kAccessRemoteRead);
    auto* base = static_cast<uint8_t*>(map_region_->addr());
    std::vector<uint64_t> next = part_offset_;
    for (size_t i = 0; i < count; ++i) {
      std::memcpy(base + next[part[i]], in + i * rb, rb);
      next[part[i]] += rb;
    }
  }
  mapped_ = true;
  stats_.records_mapped += count;
  stats_.map_s += since(start);
}

rdma::Completion Shuffle::Impl::next(const std::string& waiting_for) {
  rdma::Completion c;
  const auto left = deadline_ - Clock::now();
  if (left <= Clock::duration::zero() ||
      !cq_->wait(&c, std::chrono::duration_cast<std::chrono::microseconds>(left))) {
    throw timeout_error("round " + std::to_string(round_) + ": waited " +
                            std::to_string(fabric_.timeout().count()) + " ms for " + waiting_for,
                        {.rank = rank_, .op = "shuffle"});
  }
  if (!c.ok()) {
    const int peer = ctx_peer(c.context);
    std::string what;
    switch (ctx_op(c.context)) {
      case Op::kLocationIn: what = "the location of its block from mapper " + std::to_string(peer); break;
      case Op::kTargetIn: what = "where to write its block, from reducer " + std::to_string(peer); break;
      case Op::kDoneIn: what = "the end of the round from rank " + std::to_string(peer); break;
      case Op::kSend: what = "a message to rank " + std::to_string(peer); break;
      case Op::kRead: what = "reading " + block_text(peer, from_[peer].bytes); break;
      case Op::kWrite: what = "writing its block of partition " + std::to_string(peer) + " (" +
                              std::to_string(part_bytes_[peer]) + " bytes) to reducer " +
                              std::to_string(peer); break;
    }
    throw Error(c.error->category(),
                "round " + std::to_string(round_) + ": " + what + ": " + c.error->message(),
                {.rank = rank_, .peer = peer, .op = "shuffle"});
  }
  return c;
}

std::string Shuffle::Impl::block_text(int mapper, uint64_t bytes) const {
  return "the block of partition " + std::to_string(rank_) + " on mapper " +
         std::to_string(mapper) + " (" + std::to_string(bytes) + " bytes)";
}

void Shuffle::Impl::send_locations() {
  // Posted receives first: a peer's message then lands straight in from_.
  from_.assign(size_, BlockWire{});
  int expected = 0;
  for (int m = 0; m < size_; ++m) {
    if (m == rank_) continue;
    fabric_.recv(m, &from_[m], sizeof(BlockWire), tag(MsgKind::kLocation), *cq_,
                 ctx(Op::kLocationIn, m));
    ++expected;
  }
  std::vector<BlockWire> out(size_);
  const rdma::RemoteKey key = map_region_ ? map_region_->remote_key() : rdma::RemoteKey{};
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    out[r] = {key.addr, key.length, key.key, part_offset_[r], part_bytes_[r]};
    fabric_.send(r, &out[r], sizeof(BlockWire), tag(MsgKind::kLocation), 0, *cq_, ctx(Op::kSend, r));
    ++expected;
  }
  std::vector<uint8_t> have(size_, 0);
  while (expected > 0) {
    std::string waiting;
    for (int m = 0; m < size_; ++m)
      if (m != rank_ && !have[m]) {
        waiting = "the location of its block from mapper " + std::to_string(m);
        break;
      }
    rdma::Completion c = next(waiting.empty() ? "its location messages to be sent" : waiting);
    if (ctx_op(c.context) == Op::kLocationIn) {
      const int m = ctx_peer(c.context);
      if (c.bytes != sizeof(BlockWire))
        throw remote_error("a location message of " + std::to_string(c.bytes) + " bytes",
                           {.rank = rank_, .peer = m, .op = "shuffle"});
      have[m] = 1;
    }
    --expected;
  }
}

void Shuffle::Impl::receive_pull(Buffer& out, const std::vector<uint64_t>& at) {
  struct Piece {
    int mapper;
    uint64_t offset;  // in the block
    uint64_t bytes;
  };
  // Mapper rank+1 first, then rank+2, ...: reducers start on different mappers.
  std::deque<Piece> todo;
  for (int k = 1; k < size_; ++k) {
    const int m = (rank_ + k) % size_;
    for (uint64_t off = 0; off < from_[m].bytes; off += options_.fetch_bytes)
      todo.push_back({m, off, std::min<uint64_t>(options_.fetch_bytes, from_[m].bytes - off)});
  }
  int in_flight = 0;
  while (!todo.empty() || in_flight > 0) {
    while (!todo.empty() && in_flight < options_.in_flight) {
      const Piece p = todo.front();
      todo.pop_front();
      const BlockWire& b = from_[p.mapper];
      fabric_.read(p.mapper, out.data() + at[p.mapper] + p.offset, p.bytes,
                   rdma::RemoteKey{b.addr, b.length, b.key}, b.offset + p.offset, *cq_,
                   ctx(Op::kRead, p.mapper, p.offset));
      ++in_flight;
    }
    rdma::Completion c = next("reads of its blocks (" + std::to_string(in_flight) + " in flight)");
    if (ctx_op(c.context) == Op::kRead) {
      --in_flight;
      stats_.bytes_received += c.bytes;
    }
  }
}

void Shuffle::Impl::finish_round() {
  // pull: tell every mapper we are done with its block, and wait until every reducer is done
  // with ours before the region goes.
  std::vector<uint64_t> in(size_), out(size_, round_);
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
        waiting = "rank " + std::to_string(p) + " to finish reading its block of partition " +
                  std::to_string(p) + " (" + std::to_string(part_bytes_[p]) + " bytes)";
        break;
      }
    rdma::Completion c = next(waiting);
    if (ctx_op(c.context) == Op::kDoneIn) have[ctx_peer(c.context)] = 1;
    --expected;
  }
}

Buffer Shuffle::Impl::exchange() {
  try {
    return run_round();
  } catch (...) {
    // Receives, reads and writes of this round may still be posted into buffers the unwind
    // frees (the push round's locals, the partition being filled): the fabric fails them
    // all, and from cancel()'s return writes nothing more into them. The round is over; the
    // next starts clean, its messages tagged apart from this one's leftovers.
    fabric_.cancel(*cq_);
    rdma::Completion drained;
    while (cq_->poll(&drained)) {
    }
    map_region_.reset();
    mapped_ = false;
    ++round_;
    throw;
  }
}

Buffer Shuffle::Impl::run_round() {
  const auto start = Clock::now();
  deadline_ = start + fabric_.timeout();
  if (!mapped_) {  // nothing to give this round
    part_offset_.assign(size_, 0);
    part_bytes_.assign(size_, 0);
    map_region_.reset();
  }
  send_locations();
  std::vector<uint64_t> at(size_, 0);
  uint64_t total = 0;
  for (int m = 0; m < size_; ++m) {
    at[m] = total;
    total += m == rank_ ? part_bytes_[m] : from_[m].bytes;
  }
  Buffer out(total);
  if (part_bytes_[rank_] > 0)
    std::memcpy(out.data() + at[rank_],
                static_cast<uint8_t*>(map_region_->addr()) + part_offset_[rank_], part_bytes_[rank_]);
  for (int r = 0; r < size_; ++r)
    if (r != rank_) stats_.bytes_sent += part_bytes_[r];
  if (options_.mode == ShuffleMode::kPull) {
    receive_pull(out, at);
    finish_round();
  } else {
    push_round(out, at);
  }
  map_region_.reset();
  mapped_ = false;
  ++round_;
  stats_.records_received += total / options_.record_bytes;
  stats_.exchange_s += since(start);
  return out;
}

Shuffle::Shuffle(rdma::Fabric& fabric, ShuffleOptions options)
    : impl_(std::make_unique<Impl>(fabric, options)) {}
Shuffle::~Shuffle() = default;
void Shuffle::map(const void* records, size_t count,
                  const std::function<int(const uint8_t*)>& partition_of) {
  impl_->map(records, count, partition_of);
}
Buffer Shuffle::exchange() { return impl_->exchange(); }
const ShuffleStats& Shuffle::stats() const { return impl_->stats(); }

}  // namespace plait::shuffle
