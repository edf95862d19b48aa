// Push mode: each reducer registers the buffer its partition lands in and tells every mapper
// where its blocks go; mappers write their blocks there, one run's after another, and say when
// they are done. With key_bytes set the reducer then merges the runs where they landed.
#include <cstring>
#include <deque>
#include <span>

#include "plait/error.h"
#include "shuffle/run_merge.h"
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
  std::deque<Piece> todo;
  std::vector<uint64_t> writes_left(size_, 0);
  int in_flight = 0;
  auto send_done = [&](int r) {
    fabric_.send(r, &done_out[r], sizeof(uint64_t), tag(MsgKind::kDone), 0, *cq_, ctx(Op::kSend, r));
    ++messages;
  };
  while (messages > 0 || in_flight > 0 || !todo.empty()) {
    while (!todo.empty() && in_flight < options_.in_flight) {
      const Piece p = todo.front();
      todo.pop_front();
      const BlockWire& t = to_[p.reducer];
      fabric_.write(p.reducer, p.from, p.bytes, rdma::RemoteKey{t.addr, t.length, t.key},
                    t.offset + p.offset, std::nullopt, *cq_, ctx(Op::kWrite, p.reducer));
      ++in_flight;
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
        if (to_[peer].bytes != part_bytes_[peer])
          throw remote_error("reducer expects " + std::to_string(to_[peer].bytes) +
                                 " bytes of partition " + std::to_string(peer) + ", we have " +
                                 std::to_string(part_bytes_[peer]),
                             {.rank = rank_, .peer = peer, .op = "shuffle"});
        uint64_t to = 0;
        for (const Run& run : runs_) {
          const uint8_t* segment = run.bytes[peer] > 0 ? run_data(run) + run.offset[peer] : nullptr;
          for (uint64_t off = 0; off < run.bytes[peer]; off += options_.fetch_bytes) {
            todo.push_back({peer, segment + off, to + off,
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

void Shuffle::Impl::merge_local(const Buffer& out, const std::vector<uint64_t>& at,
                                const Sink& sink) {
  std::vector<std::span<const uint8_t>> runs;
  for (int m = 0; m < size_; ++m) {
    uint64_t from = at[m];
    for (const BlockWire& b : from_[m]) {
      runs.emplace_back(out.data() + from, b.bytes);
      from += b.bytes;
    }
  }
  std::vector<uint8_t> given(runs.size(), 0);
  const size_t rb = options_.record_bytes;
  const size_t batch_records = std::max<size_t>(1, options_.fetch_bytes / rb);
  Buffer batch(batch_records * rb);
  merge_runs(
      runs.size(), rb, options_.key_bytes,
      [&](size_t r) -> std::span<const uint8_t> {
        if (given[r]) return {};
        given[r] = 1;
        return runs[r];
      },
      batch.data(), batch_records, sink);
}

}  // namespace plait::shuffle
