// Dispatch and combine calls on both paths. Each starts its transfers when made and finishes
// in wait(): the one-sided path copies out of (dispatch) or sums from (combine) the windows;
// the alltoallv path exchanges counts, then rows.
#include <cstring>
#include <string>

#include "core/clock.h"
#include "moe/dispatcher_state.h"
#include "plait/error.h"

namespace plait::moe {
namespace {

// Bytes per rank of an alltoallv, but none to or from `self`: a rank's own rows are copied
// straight to their place, not through a staging buffer.
std::vector<size_t> bytes_of(const std::vector<size_t>& offsets, size_t unit, int self) {
  std::vector<size_t> b(offsets.size() - 1);
  for (size_t p = 0; p + 1 < offsets.size(); ++p)
    b[p] = static_cast<int>(p) == self ? 0 : (offsets[p + 1] - offsets[p]) * unit;
  return b;
}
std::vector<size_t> displs_of(const std::vector<size_t>& offsets, size_t unit) {
  std::vector<size_t> d(offsets.size() - 1);
  for (size_t p = 0; p + 1 < offsets.size(); ++p) d[p] = offsets[p] * unit;
  return d;
}

class CallBase : public Call {
 public:
  CallBase(std::shared_ptr<DispatcherState> impl, Path path, const char* op)
      : impl_(std::move(impl)), path_(path), op_(op) {}
  Path path() const override { return path_; }
  std::shared_ptr<const Handle> handle() const override { return nullptr; }
  const std::vector<int64_t>& tokens_per_expert() const override { return tokens_per_expert_; }
  void wait() override { wait(impl_->comm->timeout()); }
  void wait(std::chrono::milliseconds timeout) override {
    if (done_) return;
    try {
      finish(timeout);
    } catch (const Error& e) {
      impl_->broken = e.what();
      impl_->busy = false;
      done_ = true;
      if (e.message().rfind(op_, 0) == 0) throw;
      // A collective's error: say which call of the dispatcher it ended.
      throw Error(e.category(), std::string(op_) + " (" + std::string(to_string(path_)) + "): " + e.message(),
                  e.context());
    }
    impl_->busy = false;
    done_ = true;
  }

 protected:
  virtual void finish(std::chrono::milliseconds timeout) = 0;
  const Shape& shape() const { return impl_->shape; }
  int rank() const { return impl_->rank; }
  int size() const { return impl_->shape.size; }

  std::shared_ptr<DispatcherState> impl_;
  Path path_;
  const char* op_;
  bool done_ = false;
  std::vector<int64_t> tokens_per_expert_;
};

// Packs this rank's rows (and meta records) for every destination, in send order, into the
// dispatcher's send buffers: rows[send_offsets[p]..] is p's.
void pack(DispatcherState& d, const Handle& h, const void* x, const int64_t* topk_idx,
          const float* topk_weights, bool meta, bool skip_self) {
  const size_t rows = h.send_offsets().back();
  if (d.send_rows.size() < rows * d.row_bytes()) d.send_rows.resize(rows * d.row_bytes());
  if (meta && d.send_meta.size() < rows * d.shape.meta_bytes()) d.send_meta.resize(rows * d.shape.meta_bytes());
  for (int p = 0; p < d.shape.size; ++p) {
    if (skip_self && p == d.rank) continue;
    const size_t first = h.send_offsets()[p], n = h.send_offsets()[p + 1] - first;
    const int32_t* tokens = h.send_tokens().data() + first;
    gather_rows(x, d.row_bytes(), tokens, n, d.send_rows.data() + first * d.row_bytes());
    if (meta)
      write_meta(d.shape, p, topk_idx, topk_weights, tokens, n,
                 d.send_meta.data() + first * d.shape.meta_bytes());
  }
}

// The pieces of x that hold `tokens`' rows, consecutive rows joined.
void add_row_pieces(const void* x, size_t row_bytes, const int32_t* tokens, size_t n,
                    std::vector<rdma::LocalPiece>* pieces) {
  const auto* base = static_cast<const std::byte*>(x);
  for (size_t i = 0; i < n;) {
    size_t run = 1;
    while (i + run < n && tokens[i + run] == tokens[i] + static_cast<int32_t>(run)) ++run;
    pieces->push_back({base + static_cast<size_t>(tokens[i]) * row_bytes, run * row_bytes});
    i += run;
  }
}

// One-sided blocks are [rows][meta] per destination. Where the transport gathers, the rows go
// straight from x and only the meta records are packed; elsewhere both are packed, in one
// buffer.
std::vector<WindowExchange::Block> pack_blocks(DispatcherState& d, const Handle& h, const void* x,
                                               const int64_t* topk_idx, const float* topk_weights,
                                               bool meta) {
  const size_t meta_bytes = meta ? d.shape.meta_bytes() : 0;
  const size_t unit = d.row_bytes() + meta_bytes;
  const size_t rows = h.send_offsets().back();
  if (d.send_rows.size() < rows * unit) d.send_rows.resize(rows * unit);
  std::vector<WindowExchange::Block> blocks(d.shape.size);
  for (int p = 0; p < d.shape.size; ++p) {
    const size_t first = h.send_offsets()[p], n = h.send_offsets()[p + 1] - first;
    if (p == d.rank) continue;
    std::byte* at = d.send_rows.data() + first * unit;
    const int32_t* tokens = h.send_tokens().data() + first;
    WindowExchange::Block& b = blocks[p];
    b.bytes = n * unit;
    b.rows = static_cast<uint32_t>(n);
    if (n > 0 && d.windows->gathers(p)) {
      add_row_pieces(x, d.row_bytes(), tokens, n, &b.pieces);
      if (meta) {
        write_meta(d.shape, p, topk_idx, topk_weights, tokens, n, at);
        b.pieces.push_back({at, n * meta_bytes});
      }
      continue;
    }
    gather_rows(x, d.row_bytes(), tokens, n, at);
    if (meta) write_meta(d.shape, p, topk_idx, topk_weights, tokens, n, at + n * d.row_bytes());
    b.pieces.push_back({at, n * unit});
  }
  return blocks;
}

class FreshDispatch final : public CallBase {
 public:
  FreshDispatch(std::shared_ptr<DispatcherState> impl, Path path, const void* x,
                const int64_t* topk_idx, const float* topk_weights, size_t num_tokens,
                RecvAllocator allocate)
      : CallBase(std::move(impl), path, "moe dispatch"), x_(x), idx_(topk_idx), w_(topk_weights),
        allocate_(std::move(allocate)), handle_(std::make_shared<Handle>()) {
    DispatcherState& d = *impl_;
    if (num_tokens > d.options.max_tokens)
      throw invalid_usage("moe dispatch: " + std::to_string(num_tokens) + " tokens, more than max_tokens " +
                              std::to_string(d.options.max_tokens),
                          d.context(op_));
    HandleBuilder::num_tokens(*handle_) = num_tokens;
    route(d.shape, d.rank, topk_idx, num_tokens, &HandleBuilder::send_tokens(*handle_),
          &HandleBuilder::send_offsets(*handle_));
    if (path_ == Path::kOneSided) {
      d.windows->start(pack_blocks(d, *handle_, x, topk_idx, topk_weights, true), BlockKind::kDispatch,
                       false, op_);
      return;
    }
    for (int p = 0; p < size(); ++p)
      send_counts_[p] = static_cast<int64_t>(handle_->send_offsets()[p + 1] - handle_->send_offsets()[p]);
    counts_ = d.comm->alltoall(send_counts_.data(), recv_counts_.data(), 1, DataType::kI64);
    pack(d, *handle_, x, topk_idx, topk_weights, true, true);
  }

  std::shared_ptr<const Handle> handle() const override { return done_ ? handle_ : nullptr; }

 private:
  void finish(std::chrono::milliseconds timeout) override {
    DispatcherState& d = *impl_;
    tokens_per_expert_.assign(d.shape.experts_per_rank(), 0);
    auto& recv = HandleBuilder::recv_offsets(*handle_);
    recv.assign(size() + 1, 0);
    const Shape& s = shape();
    if (path_ == Path::kOneSided) {
      auto arrived = d.windows->finish(timeout, op_);
      for (int p = 0; p < size(); ++p)
        recv[p + 1] = recv[p] + (p == rank() ? self_rows() : arrived[p].rows);
      RecvBuffers out = allocate_(recv.back());
      for (int p = 0; p < size(); ++p) {
        const size_t at = recv[p], n = recv[p + 1] - at;
        int64_t* idx = out.topk_idx ? out.topk_idx + at * s.topk : nullptr;
        float* w = out.topk_weights ? out.topk_weights + at * s.topk : nullptr;
        auto* rows = static_cast<std::byte*>(out.x) + at * s.row_bytes;
        if (p == rank()) {
          const int32_t* tokens = handle_->send_tokens().data() + handle_->send_offsets()[p];
          gather_rows(x_, s.row_bytes, tokens, n, rows);
          std::vector<std::byte> meta(n * s.meta_bytes());
          write_meta(s, p, idx_, w_, tokens, n, meta.data());
          read_meta(s, meta.data(), n, idx, w, &tokens_per_expert_);
        } else {
          if (n > 0) std::memcpy(rows, arrived[p].data, n * s.row_bytes);
          read_meta(s, arrived[p].data + n * s.row_bytes, n, idx, w, &tokens_per_expert_);
        }
      }
      return;
    }
    counts_->wait(timeout);
    for (int p = 0; p < size(); ++p) {
      if (recv_counts_[p] < 0 || static_cast<size_t>(recv_counts_[p]) > d.options.max_tokens)
        throw remote_error("moe dispatch: rank " + std::to_string(p) + " announced " +
                               std::to_string(recv_counts_[p]) + " rows (max_tokens " +
                               std::to_string(d.options.max_tokens) + "; do all ranks make the same calls?)",
                           {.rank = rank(), .peer = p, .op = op_});
      recv[p + 1] = recv[p] + static_cast<size_t>(recv_counts_[p]);
    }
    RecvBuffers out = allocate_(recv.back());
    if (d.staged.size() < recv.back() * s.meta_bytes()) d.staged.resize(recv.back() * s.meta_bytes());
    const int me = rank();
    auto rows = d.comm->alltoallv(d.send_rows.data(), bytes_of(handle_->send_offsets(), s.row_bytes, me),
                                  displs_of(handle_->send_offsets(), s.row_bytes), out.x,
                                  bytes_of(recv, s.row_bytes, me), displs_of(recv, s.row_bytes), DataType::kU8);
    auto meta = d.comm->alltoallv(d.send_meta.data(), bytes_of(handle_->send_offsets(), s.meta_bytes(), me),
                                  displs_of(handle_->send_offsets(), s.meta_bytes()), d.staged.data(),
                                  bytes_of(recv, s.meta_bytes(), me), displs_of(recv, s.meta_bytes()),
                                  DataType::kU8);
    // Our own rows, while the others' travel.
    const int32_t* own = handle_->send_tokens().data() + handle_->send_offsets()[me];
    gather_rows(x_, s.row_bytes, own, self_rows(), static_cast<std::byte*>(out.x) + recv[me] * s.row_bytes);
    write_meta(s, me, idx_, w_, own, self_rows(), d.staged.data() + recv[me] * s.meta_bytes());
    rows->wait(timeout);
    meta->wait(timeout);
    read_meta(s, d.staged.data(), recv.back(), out.topk_idx, out.topk_weights, &tokens_per_expert_);
  }

  size_t self_rows() const {
    return handle_->send_offsets()[rank() + 1] - handle_->send_offsets()[rank()];
  }

  const void* x_;
  const int64_t* idx_;
  const float* w_;
  RecvAllocator allocate_;
  std::shared_ptr<Handle> handle_;
  std::vector<int64_t> send_counts_ = std::vector<int64_t>(impl_->shape.size);
  std::vector<int64_t> recv_counts_ = std::vector<int64_t>(impl_->shape.size);
  WorkPtr counts_;
};

// Checks that a peer sent as many rows as the handle says it would.
void expect_rows(const DispatcherState& d, const char* op, int peer, size_t got, size_t want) {
  if (got != want)
    throw remote_error(std::string(op) + ": rank " + std::to_string(peer) + " sent " + std::to_string(got) +
                           " rows where the dispatch's routing says " + std::to_string(want) +
                           " (a different handle on that rank?)",
                       {.rank = d.rank, .peer = peer, .op = op});
}

class RepeatDispatch final : public CallBase {
 public:
  RepeatDispatch(std::shared_ptr<DispatcherState> impl, Path path, std::shared_ptr<const Handle> handle,
                 const void* x, void* recv_x)
      : CallBase(std::move(impl), path, "moe dispatch (repeat)"), hp_(std::move(handle)), h_(*hp_), x_(x), recv_x_(recv_x) {
    DispatcherState& d = *impl_;
    const size_t rb = d.row_bytes();
    if (path_ == Path::kOneSided) {
      d.windows->start(pack_blocks(d, h_, x, nullptr, nullptr, false), BlockKind::kDispatch, false, op_);
      return;
    }
    pack(d, h_, x, nullptr, nullptr, false, true);
    rows_ = d.comm->alltoallv(d.send_rows.data(), bytes_of(h_.send_offsets(), rb, rank()),
                              displs_of(h_.send_offsets(), rb), recv_x, bytes_of(h_.recv_offsets(), rb, rank()),
                              displs_of(h_.recv_offsets(), rb), DataType::kU8);
  }

 private:
  void finish(std::chrono::milliseconds timeout) override {
    DispatcherState& d = *impl_;
    const size_t rb = d.row_bytes();
    if (path_ != Path::kOneSided) {
      const int me = rank();
      gather_rows(x_, rb, h_.send_tokens().data() + h_.send_offsets()[me],
                  h_.send_offsets()[me + 1] - h_.send_offsets()[me],
                  static_cast<std::byte*>(recv_x_) + h_.recv_offsets()[me] * rb);
      rows_->wait(timeout);
      return;
    }
    auto arrived = d.windows->finish(timeout, op_);
    const auto& recv = h_.recv_offsets();
    for (int p = 0; p < size(); ++p) {
      const size_t n = recv[p + 1] - recv[p];
      auto* rows = static_cast<std::byte*>(recv_x_) + recv[p] * rb;
      if (p == rank()) {
        gather_rows(x_, rb, h_.send_tokens().data() + h_.send_offsets()[p], n, rows);
      } else {
        expect_rows(d, op_, p, arrived[p].rows, n);
        if (n > 0) std::memcpy(rows, arrived[p].data, n * rb);
      }
    }
  }

  std::shared_ptr<const Handle> hp_;
  const Handle& h_;
  const void* x_;
  void* recv_x_;
  WorkPtr rows_;
};

class Combine final : public CallBase {
 public:
  Combine(std::shared_ptr<DispatcherState> impl, Path path, std::shared_ptr<const Handle> handle, const void* y,
          const float* y_weights, void* out, float* out_weights)
      : CallBase(std::move(impl), path, "moe combine"), hp_(std::move(handle)), h_(*hp_), y_(y), yw_(y_weights), out_(out),
        out_w_(out_weights) {
    DispatcherState& d = *impl_;
    const Shape& s = shape();
    const auto& recv = h_.recv_offsets();
    if (path_ == Path::kOneSided) {
      // Rows go back straight from y; with weights, [rows][weights] is packed first unless
      // the transport gathers.
      std::vector<WindowExchange::Block> blocks(size());
      const size_t unit = s.row_bytes + (yw_ ? s.weight_bytes() : 0);
      if (yw_ && d.send_rows.size() < recv.back() * unit) d.send_rows.resize(recv.back() * unit);
      for (int p = 0; p < size(); ++p) {
        const size_t n = recv[p + 1] - recv[p];
        const auto* rows = static_cast<const std::byte*>(y) + recv[p] * s.row_bytes;
        if (p == rank()) continue;
        blocks[p].bytes = n * unit;
        blocks[p].rows = static_cast<uint32_t>(n);
        if (!yw_) {
          blocks[p].pieces = {{rows, n * s.row_bytes}};
        } else if (n > 0 && d.windows->gathers(p)) {
          blocks[p].pieces = {{rows, n * s.row_bytes}, {yw_ + recv[p] * s.topk, n * s.weight_bytes()}};
        } else {
          std::byte* at = d.send_rows.data() + recv[p] * unit;
          if (n > 0) {
            std::memcpy(at, rows, n * s.row_bytes);
            std::memcpy(at + n * s.row_bytes, yw_ + recv[p] * s.topk, n * s.weight_bytes());
          }
          blocks[p].pieces = {{at, n * unit}};
        }
      }
      d.windows->start(blocks, BlockKind::kCombine, yw_ != nullptr, op_);
      return;
    }
    const size_t back = h_.send_offsets().back();
    if (d.staged.size() < back * s.row_bytes) d.staged.resize(back * s.row_bytes);
    const int me = rank();
    rows_ = d.comm->alltoallv(y, bytes_of(recv, s.row_bytes, me), displs_of(recv, s.row_bytes), d.staged.data(),
                              bytes_of(h_.send_offsets(), s.row_bytes, me), displs_of(h_.send_offsets(), s.row_bytes),
                              DataType::kU8);
    if (yw_) {
      staged_w_.resize(back * s.topk);
      weights_ = d.comm->alltoallv(yw_, bytes_of(recv, s.weight_bytes(), me), displs_of(recv, s.weight_bytes()),
                                   staged_w_.data(), bytes_of(h_.send_offsets(), s.weight_bytes(), me),
                                   displs_of(h_.send_offsets(), s.weight_bytes()), DataType::kU8);
    }
  }

 private:
  void finish(std::chrono::milliseconds timeout) override {
    DispatcherState& d = *impl_;
    const Shape& s = shape();
    const size_t hidden = d.options.hidden;
    std::vector<WindowExchange::Arrived> arrived;
    if (path_ == Path::kOneSided) {
      arrived = d.windows->finish(timeout, op_);
    } else {
      rows_->wait(timeout);
      if (weights_) weights_->wait(timeout);
    }
    std::vector<uint8_t> touched(h_.num_tokens(), 0);
    const auto& recv = h_.recv_offsets();
    for (int p = 0; p < size(); ++p) {  // in rank order, whichever came first
      const size_t first = h_.send_offsets()[p], n = h_.send_offsets()[p + 1] - first;
      const int32_t* tokens = h_.send_tokens().data() + first;
      const void* rows;
      const float* w;
      if (p == rank()) {
        rows = static_cast<const std::byte*>(y_) + recv[p] * s.row_bytes;
        w = yw_ ? yw_ + recv[p] * s.topk : nullptr;
      } else if (path_ == Path::kOneSided) {
        expect_rows(d, op_, p, arrived[p].rows, n);
        if (arrived[p].flag != (yw_ != nullptr))
          throw invalid_usage("moe combine: rank " + std::to_string(p) + (arrived[p].flag ? " sent" : " did not send") +
                                  " weights, this rank " + (yw_ ? "did" : "did not"),
                              {.rank = rank(), .peer = p, .op = op_});
        rows = arrived[p].data;
        w = yw_ ? reinterpret_cast<const float*>(arrived[p].data + n * s.row_bytes) : nullptr;
      } else {
        rows = d.staged.data() + first * s.row_bytes;
        w = yw_ ? staged_w_.data() + first * s.topk : nullptr;
      }
      accumulate_rows(d.options.dtype, hidden, rows, tokens, n, out_, w, out_w_, s.topk, touched);
    }
    zero_untouched(s.row_bytes, out_, out_w_, s.topk, touched);
  }

  std::shared_ptr<const Handle> hp_;
  const Handle& h_;
  const void* y_;
  const float* yw_;
  void* out_;
  float* out_w_;
  WorkPtr rows_, weights_;
  std::vector<float> staged_w_;
};

}  // namespace

std::shared_ptr<Call> start_fresh_dispatch(std::shared_ptr<DispatcherState> impl, Path path,
                                           const void* x, const int64_t* topk_idx,
                                           const float* topk_weights, size_t num_tokens,
                                           RecvAllocator allocate) {
  return std::make_shared<FreshDispatch>(std::move(impl), path, x, topk_idx, topk_weights, num_tokens,
                                         std::move(allocate));
}

std::shared_ptr<Call> start_repeat_dispatch(std::shared_ptr<DispatcherState> impl, Path path,
                                            std::shared_ptr<const Handle> handle, const void* x, void* recv_x) {
  return std::make_shared<RepeatDispatch>(std::move(impl), path, std::move(handle), x, recv_x);
}

std::shared_ptr<Call> start_combine(std::shared_ptr<DispatcherState> impl, Path path,
                                    std::shared_ptr<const Handle> handle, const void* y, const float* y_weights,
                                    void* out, float* out_weights) {
  return std::make_shared<Combine>(std::move(impl), path, std::move(handle), y, y_weights, out, out_weights);
}

}  // namespace plait::moe
