// A reducer fetches its blocks. Pull: a block in a mapper's memory is read with one-sided
// reads (the mapper's CPU takes no part); a spilled block is asked for with a read request,
// which the mapper serves from its spill file whenever it waits on its queue (in next()),
// whatever it is doing in the round. A reducer either fetches every block straight into its
// partition (receive_pull) or merges the blocks as sorted runs, each fetched a window at a
// time while the windows before it are merged (merge_fetched); in push mode with a key the
// same merge gives the mapper a credit for each window instead (shuffle_push.cc).
#include <algorithm>
#include <cstring>
#include <span>

#include "plait/error.h"
#include "shuffle/run_merge.h"
#include "shuffle/shuffle_impl.h"

namespace plait::shuffle {

void Shuffle::Impl::post_serving() {
  // A receive per peer and slot: credits (push with a key) or read requests (pull).
  const auto post_slots = [&](auto& slots, MsgKind kind, Op op) {
    slots.assign(size_ * kRequestSlots, {});
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      for (int s = 0; s < kRequestSlots; ++s)
        fabric_.recv(p, &slots[p * kRequestSlots + s], sizeof(slots[0]), tag(kind), *cq_, ctx(op, p, s));
    }
  };
  if (credited()) post_slots(credit_in_, MsgKind::kCredit, Op::kCreditIn);
  else post_slots(request_in_, MsgKind::kRequest, Op::kRequestIn);
  serve_buffer_.clear();
  serve_buffer_.resize(kServeBuffers);
  serve_free_.clear();
  for (int b = 0; b < kServeBuffers; ++b) serve_free_.push_back(b);
}

bool Shuffle::Impl::serve(const rdma::Completion& c) {
  if (serve_credit(c)) return true;
  const int peer = ctx_peer(c.context);
  switch (ctx_op(c.context)) {
    case Op::kRequestIn: {
      const int slot = static_cast<int>(ctx_id(c.context));
      RequestWire& in = request_in_[peer * kRequestSlots + slot];
      check_request(c.bytes, peer, rank_);
      serve_queue_.push_back({peer, in});
      fabric_.recv(peer, &in, sizeof(RequestWire), tag(MsgKind::kRequest), *cq_,
                   ctx(Op::kRequestIn, peer, slot));
      break;
    }
    case Op::kServed:
      serve_free_.push_back(static_cast<int>(ctx_id(c.context)));
      --serving_;
      break;
    case Op::kAsked:
      --asks_out_;
      break;
    default:
      return false;
  }
  while (!serve_queue_.empty() && !serve_free_.empty()) {
    const Served s = serve_queue_.front();
    serve_queue_.pop_front();
    const int b = serve_free_.back();
    serve_free_.pop_back();
    // A request past the file's end (a reducer's bug) gets no bytes: the reducer names it.
    const size_t bytes = spill_ ? served_bytes(s.request, spill_->size()) : 0;
    if (serve_buffer_[b].size() < bytes) serve_buffer_[b] = Buffer(bytes);
    if (bytes > 0) spill_->read(s.request.offset, bytes, serve_buffer_[b].data());
    fabric_.send(s.peer, serve_buffer_[b].data(), bytes, tag(MsgKind::kData, s.request.id), 0, *cq_,
                 ctx(Op::kServed, s.peer, static_cast<uint64_t>(b)));
    ++serving_;
    ++stats_.spill_requests_served;
  }
  return true;
}

bool Shuffle::Impl::start_fetch(const Fetch& f) {
  const BlockWire& b = *f.block;
  if (f.mapper == rank_) {  // ours: a copy
    if (b.in_file) {
      spill_->read(b.offset + f.offset, f.bytes, f.dest);
    } else {
      const size_t i = static_cast<size_t>(f.block - from_[rank_].data());
      std::memcpy(f.dest, own_data_[i] + f.offset, f.bytes);
    }
    return true;
  }
  ++fetches_;
  if (!b.in_file && !credited()) {
    fabric_.read(f.mapper, f.dest, f.bytes, rdma::RemoteKey{b.addr, b.length, b.key}, b.offset + f.offset,
                 *cq_, ctx(Op::kRead, f.mapper, f.id));
    return false;
  }
  request_queue_[f.mapper].push_back(f);
  pump_requests(f.mapper);
  return false;
}

void Shuffle::Impl::pump_requests(int mapper) {
  auto& queue = request_queue_[mapper];
  while (!queue.empty() && requests_out_[mapper] < kRequestSlots) {
    const Fetch f = queue.front();
    queue.pop_front();
    ++requests_out_[mapper];
    if (credited()) {
      ask_credit(f);
      continue;
    }
    // The answer's receive is posted before the question leaves.
    fabric_.recv(mapper, f.dest, f.bytes, tag(MsgKind::kData, f.id), *cq_, ctx(Op::kData, mapper, f.id));
    request_out_[f.id] = {f.block->offset + f.offset, f.bytes, f.id};
    fabric_.send(mapper, &request_out_[f.id], sizeof(RequestWire), tag(MsgKind::kRequest), 0, *cq_,
                 ctx(Op::kAsked, mapper));
    ++asks_out_;
  }
}

void Shuffle::Impl::fetched(const rdma::Completion& c, uint64_t expected_bytes) {
  const int m = ctx_peer(c.context);
  --fetches_;
  if (ctx_op(c.context) == Op::kWritten) {  // the mapper wrote the window: no bytes here
    --requests_out_[m];
    pump_requests(m);
    stats_.bytes_received += expected_bytes;
    return;
  }
  if (ctx_op(c.context) == Op::kData) {
    --requests_out_[m];
    if (c.bytes != expected_bytes)
      throw remote_error("mapper " + std::to_string(m) + " answered a read of " +
                             std::to_string(expected_bytes) + " bytes of its spill file with " +
                             std::to_string(c.bytes) + ", for " + block_text(m, from_bytes_[m]),
                         {.rank = rank_, .peer = m, .op = "shuffle"});
    pump_requests(m);
  }
  stats_.bytes_received += c.bytes;
}

void Shuffle::Impl::receive_pull(Buffer& out) {
  std::vector<uint64_t> at(size_, 0);
  for (int m = 1; m < size_; ++m) at[m] = at[m - 1] + from_bytes_[m - 1];
  // Mapper rank+1 first, then rank+2, ...: reducers start on different mappers. Ours last.
  std::vector<Fetch> pieces;
  for (int k = 1; k <= size_; ++k) {
    const int m = (rank_ + k) % size_;
    uint64_t in_partition = at[m];
    for (const BlockWire& b : from_[m]) {
      for (uint64_t off = 0; off < b.bytes; off += options_.fetch_bytes) {
        const uint64_t n = std::min<uint64_t>(options_.fetch_bytes, b.bytes - off);
        pieces.push_back({m, &b, off, n, out.data() + in_partition + off, pieces.size()});
      }
      in_partition += b.bytes;
    }
  }
  request_out_.assign(pieces.size(), RequestWire{});  // never resized while in flight
  size_t next_piece = 0;
  while (next_piece < pieces.size() || fetches_ > 0) {
    while (next_piece < pieces.size() && fetches_ < options_.in_flight) start_fetch(pieces[next_piece++]);
    if (fetches_ == 0) continue;
    rdma::Completion c = next("reads of its blocks (" + std::to_string(fetches_) + " in flight)");
    const Op op = ctx_op(c.context);
    if (op == Op::kRead || op == Op::kData) fetched(c, pieces[ctx_id(c.context)].bytes);
  }
}

void Shuffle::Impl::merge_fetched(const Sink& sink) {
  struct Stream {
    int mapper;
    const BlockWire* block;
    const uint8_t* direct = nullptr;  // our own block in memory: no window needed
    bool given = false;
    uint64_t posted = 0;  // bytes of the block asked for so far
    uint8_t* window[2] = {nullptr, nullptr};
    uint64_t length[2] = {0, 0};
    bool ready[2] = {false, false};
    int front = 0;
    bool started = false;
  };
  std::vector<Stream> streams;
  for (int m = 0; m < size_; ++m)
    for (const BlockWire& b : from_[m]) {
      Stream s{m, &b};
      if (m == rank_ && !b.in_file) s.direct = own_data_[&b - from_[rank_].data()];
      streams.push_back(s);
    }
  const size_t rb = options_.record_bytes;
  // Two windows a stream; with a budget they share it.
  uint64_t window = options_.fetch_bytes;
  if (options_.memory_bytes > 0 && !streams.empty())
    window = std::min<uint64_t>(window, options_.memory_bytes / (2 * streams.size()));
  window = std::max<uint64_t>(rb, window - window % rb);
  // The windows, in one piece (registered for the mappers' writes when they push): none for
  // a direct stream, no larger than its block for the others.
  uint64_t arena_bytes = 0;
  for (const Stream& s : streams)
    if (!s.direct) arena_bytes += 2 * std::min(window, s.block->bytes);
  // A member, not a local: on an error it must outlive the reads and writes into it until
  // they are cancelled (end_round frees it).
  windows_ = Buffer(arena_bytes);
  if (credited() && arena_bytes > 0) {
    windows_region_ = fabric_.register_memory(windows_.data(), arena_bytes, rdma::kAccessRemoteWrite);
    windows_base_ = windows_.data();
  }
  for (uint64_t at = 0; Stream& s : streams) {
    if (s.direct) continue;
    for (uint8_t*& w : s.window) {
      w = windows_.data() + at;
      at += std::min(window, s.block->bytes);
    }
  }

  request_out_.assign(2 * streams.size(), RequestWire{});  // never resized while in flight
  credit_out_.assign(2 * streams.size(), CreditWire{});
  const auto post = [&](size_t si, int w) {
    Stream& s = streams[si];
    s.length[w] = std::min<uint64_t>(window, s.block->bytes - s.posted);
    if (s.length[w] == 0) {
      s.ready[w] = true;
      return;
    }
    s.ready[w] = start_fetch({s.mapper, s.block, s.posted, s.length[w], s.window[w], si * 2 + w});
    s.posted += s.length[w];
  };
  for (size_t si = 0; si < streams.size(); ++si)
    if (!streams[si].direct) {
      post(si, 0);
      post(si, 1);
    }
  const auto next_window = [&](size_t si) -> std::span<const uint8_t> {
    Stream& s = streams[si];
    if (s.direct) {
      if (s.given) return {};
      s.given = true;
      return {s.direct, s.block->bytes};
    }
    if (s.started)
      post(si, s.front ^ 1);  // the window handed out last is merged: fill it again
    s.started = true;
    while (!s.ready[s.front]) {
      const rdma::Completion c =
          next(block_text(s.mapper, from_bytes_[s.mapper]) + ", " + std::to_string(s.posted) +
               " bytes of it asked for (" + std::to_string(fetches_) + " in flight)");
      const Op op = ctx_op(c.context);
      if (op != Op::kRead && op != Op::kData && op != Op::kWritten) continue;
      const uint64_t id = ctx_id(c.context);
      Stream& t = streams[id / 2];
      fetched(c, t.length[id % 2]);
      t.ready[id % 2] = true;
    }
    const int w = s.front;
    s.front ^= 1;
    return {s.window[w], s.length[w]};
  };
  const size_t batch_records = std::max<size_t>(1, window / rb);
  Buffer batch(batch_records * rb);
  merge_runs(streams.size(), rb, options_.key_bytes, next_window, batch.data(), batch_records, sink);
  // Every window is merged: nothing more lands in them.
  windows_region_.reset();
  windows_base_ = nullptr;
  windows_ = Buffer();
}

}  // namespace plait::shuffle
