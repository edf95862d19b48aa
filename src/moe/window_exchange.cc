#include "moe/window_exchange.h"

#include <algorithm>
#include <string>

#include "core/clock.h"
#include "plait/error.h"

namespace plait::moe {
namespace {

// The immediate: bit 31 the call's parity, bit 30 its kind, bit 29 the flag, the rest rows.
constexpr uint32_t kRowsMask = (1u << 29) - 1;
uint32_t encode(uint64_t call, BlockKind kind, bool flag, uint32_t rows) {
  return (static_cast<uint32_t>(call & 1) << 31) | (static_cast<uint32_t>(kind) << 30) |
         (static_cast<uint32_t>(flag) << 29) | rows;
}
int parity_of(uint32_t imm) { return static_cast<int>(imm >> 31); }
BlockKind kind_of(uint32_t imm) { return static_cast<BlockKind>((imm >> 30) & 1); }
const char* name_of(BlockKind kind) { return kind == BlockKind::kDispatch ? "dispatch" : "combine"; }

}  // namespace

WindowExchange::WindowExchange(const Bootstrap& bootstrap, const std::string& name,
                               size_t slot_bytes)
    : rank_(bootstrap.rank), size_(bootstrap.size), slot_bytes_(std::max<size_t>(slot_bytes, 64)) {
  fabric_ = rdma::Fabric::create(bootstrap, {.name = name});
  sends_ = fabric_->create_cq();
  arrivals_ = fabric_->create_cq();
  fabric_->set_imm_cq(arrivals_.get());  // before the exchange: peers write right after it
  window_ = fabric_->allocate_memory(2 * static_cast<size_t>(size_) * slot_bytes_,
                                     rdma::kAccessRemoteWrite);
  keys_ = fabric_->exchange(window_->remote_key());
  for (auto& e : early_) e.assign(size_, std::nullopt);
}

WindowExchange::~WindowExchange() {
  if (!fabric_) return;
  fabric_->set_imm_cq(nullptr);
  if (writes_pending_ > 0) fabric_->cancel(*sends_);
  window_.reset();
}

std::chrono::milliseconds WindowExchange::timeout() const { return fabric_->timeout(); }

void WindowExchange::start(const std::vector<Block>& blocks, BlockKind kind, bool flag,
                           const char* op) {
  if (writes_pending_ > 0)
    throw invalid_usage(std::string(op) + ": the previous call was not waited for",
                        {.rank = rank_, .op = op});
  const uint64_t call = calls_++;
  kind_ = kind;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const Block& b = blocks[p];
    if (b.bytes > slot_bytes_ || b.rows > kRowsMask)
      throw invalid_usage(std::string(op) + ": " + std::to_string(b.rows) + " rows (" +
                              std::to_string(b.bytes) + " bytes) for rank " + std::to_string(p) +
                              " exceed its window of " + std::to_string(slot_bytes_) +
                              " bytes (raise max_tokens)",
                          {.rank = rank_, .peer = p, .op = op, .bytes = static_cast<int64_t>(b.bytes)});
    // Our slot in p's window for this call's parity.
    const uint64_t offset = ((call & 1) * size_ + rank_) * slot_bytes_;
    const uint32_t imm = encode(call, kind, flag, b.rows);
    if (b.pieces.size() == 1)
      fabric_->write(p, b.pieces[0].data, b.bytes, keys_[p], offset, imm, *sends_, static_cast<uint64_t>(p));
    else
      fabric_->write_gathered(p, b.pieces, keys_[p], offset, imm, *sends_, static_cast<uint64_t>(p));
    ++writes_pending_;
  }
}

void WindowExchange::fail_missing(const std::vector<bool>& heard, const char* op,
                                  bool timed_out, const char* what,
                                  std::chrono::milliseconds timeout) const {
  std::string missing;
  int first = -1;
  for (int p = 0; p < size_; ++p) {
    if (heard[p]) continue;
    if (fabric_->peer_failed(p))
      throw remote_error(std::string(op) + ": rank " + std::to_string(p) + " failed: " +
                             fabric_->peer_failure(p),
                         {.rank = rank_, .peer = p, .op = op, .seq = static_cast<int64_t>(calls_ - 1)});
    if (first < 0) first = p;
    missing += (missing.empty() ? "" : ", ") + std::to_string(p);
  }
  if (timed_out)
    throw timeout_error(std::string(op) + ": " + what + " rank(s) " + missing + " within " +
                            std::to_string(timeout.count()) +
                            " ms (do all ranks make the same calls?)",
                        {.rank = rank_, .peer = first, .op = op, .seq = static_cast<int64_t>(calls_ - 1)});
}

std::vector<WindowExchange::Arrived> WindowExchange::finish(std::chrono::milliseconds timeout,
                                                            const char* op) {
  const uint64_t call = calls_ - 1;
  const int parity = static_cast<int>(call & 1);
  std::vector<Arrived> arrived(size_);
  std::vector<bool> heard(size_, false);
  heard[rank_] = true;
  int waiting = size_ - 1;
  auto take = [&](const rdma::Completion& c) {
    const int p = c.peer;
    if (kind_of(c.imm) != kind_)
      throw invalid_usage(std::string(op) + ": rank " + std::to_string(p) + " sent a " +
                              name_of(kind_of(c.imm)) + " while this rank is in a " + name_of(kind_),
                          {.rank = rank_, .peer = p, .op = op, .seq = static_cast<int64_t>(call)});
    arrived[p] = {static_cast<const std::byte*>(window_->addr()) +
                      (static_cast<size_t>(parity) * size_ + p) * slot_bytes_,
                  c.imm & kRowsMask, ((c.imm >> 29) & 1) != 0};
    heard[p] = true;
    --waiting;
  };
  for (int p = 0; p < size_; ++p)
    if (auto& e = early_[parity][p]) {
      take(*e);
      e.reset();
    }
  const Clock::time_point deadline = Clock::now() + timeout;
  const char* what = "no rows from";
  auto slice = [&] {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
    if (left.count() <= 0) fail_missing(heard, op, true, what, timeout);
    return std::min<std::chrono::microseconds>(left, std::chrono::milliseconds(100));
  };
  rdma::Completion c;
  while (waiting > 0) {
    if (!arrivals_->wait(&c, slice())) {
      fail_missing(heard, op, false, what, timeout);  // a failed peer ends the wait now
      continue;
    }
    if (!c.ok()) throw c.error->with_context({.rank = rank_, .peer = c.peer, .op = op});
    if (parity_of(c.imm) == parity && !heard[c.peer]) {
      take(c);
    } else {
      early_[parity_of(c.imm)][c.peer] = c;  // the peer's next call
    }
  }
  // Our writes landed before the peers' blocks came, mostly; their completions free the
  // sources for the caller.
  std::fill(heard.begin(), heard.end(), false);  // now: whose write completed
  heard[rank_] = true;
  what = "this rank's rows not acknowledged by";
  while (writes_pending_ > 0) {
    if (!sends_->wait(&c, slice())) {
      fail_missing(heard, op, false, what, timeout);
      continue;
    }
    --writes_pending_;
    if (!c.ok()) throw c.error->with_context({.rank = rank_, .peer = c.peer, .op = op});
    heard[static_cast<size_t>(c.context)] = true;
  }
  return arrived;
}

}  // namespace plait::moe
