// Push mode. Without a key (push_round): each reducer registers the buffer its partition lands
// in and tells every mapper where its blocks go; mappers write their blocks there, one run's
// after another, and say when they are done: the whole partition is one credit.
//
// With a key, the reducer merges its runs a window at a time (merge_fetched, shuffle_fetch.cc)
// and a window is a credit: "write these bytes of your block b here" (ask_credit). The mapper
// takes credits whenever it waits on its queue, as it serves read requests in pull mode, and
// writes each window from its memory, or from its spill file through a staging buffer, then
// tells the reducer (serve_credit, pump_pushes). The reducer's memory is its windows: within
// the budget however large its partition, as in pull mode; the difference is who moves the
// bytes (the mapper's writes here, the reducer's reads there).
#include <cstring>
#include <deque>

#include "plait/error.h"
#include "shuffle/shuffle_impl.h"

namespace plait::shuffle {

void Shuffle::Impl::push_round(Buffer& out, const std::vector<uint64_t>& at) {
  std::unique_ptr<rdma::MemoryRegion> region;
  if (!out.empty()) region = fabric_.register_memory(out.data(), out.size(), rdma::kAccessRemoteWrite);
  const rdma::RemoteKey key = region ? region->remote_key() : rdma::RemoteKey{};
  to_.assign(size_, BlockWire{});
  std::vector<BlockWire> targets(size_);
  std::vector<uint64_t> done_in(size_), done_out(size_, round_);
  std::vector<uint8_t> have_target(size_, 0), have_done(size_, 0);
  CancelOnThrow cancel_first(*this);  // before targets, done_in and done_out go
  int messages = 0;  // receives and sends not yet completed
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    fabric_.recv(p, &to_[p], sizeof(BlockWire), tag(MsgKind::kTarget), *cq_, ctx(Op::kTargetIn, p));
    fabric_.recv(p, &done_in[p], sizeof(uint64_t), tag(MsgKind::kDone), *cq_, ctx(Op::kDoneIn, p));
    targets[p] = {key.addr, key.length, key.key, at[p], from_bytes_[p]};
    fabric_.send(p, &targets[p], sizeof(BlockWire), tag(MsgKind::kTarget), 0, *cq_, ctx(Op::kSend, p));
    messages += 3;
  }
  // Ours: copied.
  for (uint64_t i = 0, to = at[rank_]; i < from_[rank_].size(); ++i) {
    std::memcpy(out.data() + to, own_data_[i], from_[rank_][i].bytes);
    to += from_[rank_][i].bytes;
  }
  struct Piece {
    int reducer;
    const uint8_t* from;
    uint64_t offset;  // in the reducer's target
    uint64_t bytes;
  };
  // Per reducer, in_flight writes outstanding to each, reducer rank+1's first. One window of
  // in_flight writes for all reducers kept too little in flight: on four namespace hosts
  // with 1 Gbit/s links the shuffle took 1.9-2.0 times its link bound (in the order the
  // targets came) and 1.9 (rank+1 first), pull 1.1; with a window per reducer 1.10-1.13.
  std::vector<std::deque<Piece>> todo(size_);
  size_t pieces_left = 0;
  std::vector<int> in_flight_to(size_, 0);
  std::vector<uint64_t> writes_left(size_, 0);
  int in_flight = 0;
  auto send_done = [&](int r) {
    fabric_.send(r, &done_out[r], sizeof(uint64_t), tag(MsgKind::kDone), 0, *cq_, ctx(Op::kSend, r));
    ++messages;
  };
  while (messages > 0 || in_flight > 0 || pieces_left > 0) {
    for (int k = 1; k < size_ && pieces_left > 0; ++k) {
      const int r = (rank_ + k) % size_;
      for (; !todo[r].empty() && in_flight_to[r] < options_.in_flight; todo[r].pop_front()) {
        const Piece& p = todo[r].front();
        const BlockWire& t = to_[r];
        fabric_.write(r, p.from, p.bytes, rdma::RemoteKey{t.addr, t.length, t.key},
                      t.offset + p.offset, std::nullopt, *cq_, ctx(Op::kWrite, r));
        --pieces_left;
        ++in_flight_to[r];
        ++in_flight;
      }
    }
    std::string waiting = "its block writes (" + std::to_string(in_flight) + " in flight)";
    for (int m = 0; m < size_ && in_flight == 0; ++m)
      if (m != rank_ && !have_done[m]) {
        waiting = "mapper " + std::to_string(m) + " to write its block of partition " +
                  std::to_string(rank_) + " (" + std::to_string(from_bytes_[m]) + " bytes)";
        break;
      }
    const rdma::Completion c = next(waiting);
    const int peer = ctx_peer(c.context);
    switch (ctx_op(c.context)) {
      case Op::kTargetIn: {
        --messages;
        have_target[peer] = 1;
        check_target(to_[peer], c.bytes, part_bytes_[peer], peer, rank_);
        uint64_t to = 0;
        for (const Run& run : runs_) {
          const uint8_t* segment = run.bytes[peer] > 0 ? run_data(run) + run.offset[peer] : nullptr;
          for (uint64_t off = 0; off < run.bytes[peer]; off += options_.fetch_bytes) {
            ++pieces_left;
            todo[peer].push_back({peer, segment + off, to + off,
                            std::min<uint64_t>(options_.fetch_bytes, run.bytes[peer] - off)});
            ++writes_left[peer];
          }
          to += run.bytes[peer];
        }
        if (writes_left[peer] == 0) send_done(peer);
        break;
      }
      case Op::kWrite:
        --in_flight;
        --in_flight_to[peer];
        if (--writes_left[peer] == 0) send_done(peer);
        break;
      case Op::kDoneIn:
        --messages;
        have_done[peer] = 1;
        stats_.bytes_received += from_bytes_[peer];
        break;
      default:
        --messages;
        break;
    }
  }
}

void Shuffle::Impl::ask_credit(const Fetch& f) {
  // The notice's receive is posted before the credit leaves.
  fabric_.recv(f.mapper, &written_sink_, sizeof(written_sink_), tag(MsgKind::kWritten, f.id), *cq_,
               ctx(Op::kWritten, f.mapper, f.id));
  const rdma::RemoteKey key = windows_region_->remote_key();
  credit_out_[f.id] = {static_cast<uint64_t>(f.block - from_[f.mapper].data()),
                       f.offset,
                       f.bytes,
                       f.id,
                       key.addr,
                       key.length,
                       key.key,
                       static_cast<uint64_t>(f.dest - windows_base_)};
  fabric_.send(f.mapper, &credit_out_[f.id], sizeof(CreditWire), tag(MsgKind::kCredit), 0, *cq_,
               ctx(Op::kAsked, f.mapper));
  ++asks_out_;
}

bool Shuffle::Impl::serve_credit(const rdma::Completion& c) {
  const int peer = ctx_peer(c.context);
  switch (ctx_op(c.context)) {
    case Op::kCreditIn: {
      const int slot = static_cast<int>(ctx_id(c.context));
      CreditWire& in = credit_in_[peer * kRequestSlots + slot];
      // A credit for bytes we do not have (a reducer's bug) is refused here, not written.
      check_credit(in, c.bytes, own_[peer], peer, rank_);
      push_queue_.push_back({peer, in, -1});
      fabric_.recv(peer, &in, sizeof(CreditWire), tag(MsgKind::kCredit), *cq_,
                   ctx(Op::kCreditIn, peer, slot));
      break;
    }
    case Op::kPushed: {  // a window written: tell its reducer, free the staging buffer
      const auto i = static_cast<uint32_t>(ctx_id(c.context));
      const Push p = pushing_[i];
      pushing_free_.push_back(i);
      if (p.buffer >= 0) serve_free_.push_back(p.buffer);
      fabric_.send(p.reducer, nullptr, 0, tag(MsgKind::kWritten, p.credit.id), 0, *cq_,
                   ctx(Op::kNotified, p.reducer));
      --serving_;
      break;
    }
    case Op::kNotified:
      --serving_;
      break;
    default:
      return false;
  }
  pump_pushes();
  return true;
}

void Shuffle::Impl::pump_pushes() {
  while (!push_queue_.empty()) {
    Push p = push_queue_.front();
    const BlockWire& b = own_[p.reducer][p.credit.block + 1];
    const uint8_t* from = own_src_[p.reducer][p.credit.block + 1];
    if (from != nullptr) {
      from += p.credit.offset;
    } else {  // spilled: read into a staging buffer first
      if (serve_free_.empty()) return;  // one comes back when a write completes
      p.buffer = serve_free_.back();
      serve_free_.pop_back();
      if (serve_buffer_[p.buffer].size() < p.credit.bytes) serve_buffer_[p.buffer] = Buffer(p.credit.bytes);
      spill_->read(b.offset + p.credit.offset, p.credit.bytes, serve_buffer_[p.buffer].data());
      from = serve_buffer_[p.buffer].data();
      ++stats_.spill_requests_served;
    }
    push_queue_.pop_front();
    uint32_t i;
    if (pushing_free_.empty()) {
      i = static_cast<uint32_t>(pushing_.size());
      pushing_.push_back(p);
    } else {
      i = pushing_free_.back();
      pushing_free_.pop_back();
      pushing_[i] = p;
    }
    fabric_.write(p.reducer, from, p.credit.bytes,
                  rdma::RemoteKey{p.credit.addr, p.credit.length, p.credit.key}, p.credit.window,
                  std::nullopt, *cq_, ctx(Op::kPushed, p.reducer, i));
    ++serving_;  // the write, then its notice: each is a completion finish_round waits for
    ++serving_;
  }
}

}  // namespace plait::shuffle
