// Expert parallelism: a mixture-of-experts layer's dispatch (every token to the ranks holding
// its top-k experts) and combine (the experts' outputs back to the token's place, summed), the
// shape of DeepEP's API on plait's transports.
//
//   plait::moe::Dispatcher d(comm, bootstrap, {.num_experts = 16, .topk = 2, .hidden = 1024,
//                                             .dtype = plait::DataType::kBF16, .max_tokens = 4096});
//   auto call = d.dispatch(x, topk_idx, topk_weights, num_tokens, allocate);
//   call->wait();                 // recv rows in the buffers `allocate` returned
//   ... experts on the received rows ...
//   d.combine(call->handle(), y, nullptr, out, nullptr)->wait();
//
// Experts are placed in blocks: rank r holds experts [r*E/n, (r+1)*E/n). A token goes to a
// rank once however many of its experts live there; the receiver gets the token's top-k
// indices as its own local expert numbers (-1 for experts elsewhere) and their weights.
//
// Two data paths, chosen per call by a cost model measured when the dispatcher is created
// (Call::path() says which ran; DispatcherOptions::path or PLAIT_MOE_PATH forces one):
//   alltoallv  counts first (an alltoall of one word per rank), then an alltoallv of the rows
//              straight into the caller's buffer;
//   one-sided  every rank writes its rows into receive windows that each peer registered once,
//              sized for the worst case, with the row count in the write's immediate: no count
//              round trip, one copy out of the window.
// A call whose routing is already known (combine, and a dispatch that repeats a handle's
// routing, as backward does) exchanges no counts on either path.
//
// Calls are collective over the communicator's ranks, in the same order on every rank, one
// at a time per dispatcher (wait() for a call before starting the next). Every wait has the
// communicator's timeout; a peer that fails or calls something else ends the call with an
// error naming the rank, the peer and the call.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "plait/bootstrap.h"
#include "plait/communicator.h"
#include "plait/types.h"

namespace plait::moe {

enum class Path : uint8_t { kAuto, kAlltoallv, kOneSided };
std::string_view to_string(Path path);               // "auto", "alltoallv", "one-sided"
Path parse_path(std::string_view name);              // throws kInvalidUsage

struct DispatcherOptions {
  int num_experts = 0;        // across the group; a multiple of its size
  int topk = 0;               // experts per token
  size_t hidden = 0;          // elements per token row
  DataType dtype = DataType::kF32;  // the rows: f32, f16 or bf16
  size_t max_tokens = 0;      // tokens a rank dispatches per call at most: sizes the windows
  Path path = Path::kAuto;    // kAuto: PLAIT_MOE_PATH, else the cost model
  std::string name = "moe";   // store scope; unique among dispatchers alive at once
};

// Where this rank's tokens go; computed locally.
struct Layout {
  std::vector<int64_t> tokens_per_rank;    // [size]: tokens sent to each rank
  std::vector<int64_t> tokens_per_expert;  // [num_experts]: this rank's (token, expert) pairs
  std::vector<uint8_t> token_in_rank;      // [num_tokens][size]: 1 where the token goes
};

// A dispatch's routing, for its combine and for backward.
class Handle {
 public:
  size_t num_tokens() const { return num_tokens_; }
  size_t num_recv() const { return recv_offsets_.back(); }
  // Rows received from each source, in source order (the recv rows are grouped so).
  const std::vector<size_t>& recv_offsets() const { return recv_offsets_; }  // [size + 1]
  // This rank's tokens sent to each rank, in the order that rank received them.
  const std::vector<int32_t>& send_tokens() const { return send_tokens_; }
  const std::vector<size_t>& send_offsets() const { return send_offsets_; }  // [size + 1]

 private:
  friend struct HandleBuilder;  // src/moe/routing.h
  size_t num_tokens_ = 0;
  std::vector<int32_t> send_tokens_;
  std::vector<size_t> send_offsets_;
  std::vector<size_t> recv_offsets_;
};

// Where received rows go, asked for once their number is known. `topk_idx` and
// `topk_weights` may be null when the caller does not want them.
struct RecvBuffers {
  void* x = nullptr;              // [rows][hidden] of dtype
  int64_t* topk_idx = nullptr;    // [rows][topk]: local expert, or -1
  float* topk_weights = nullptr;  // [rows][topk]
};
using RecvAllocator = std::function<RecvBuffers(size_t rows)>;

// A dispatch or combine in flight.
class Call {
 public:
  virtual ~Call() = default;
  // Finishes the call (copies out of the windows, sums a combine): throws its error, or a
  // kTimeout error after `timeout` naming the ranks not heard from.
  virtual void wait(std::chrono::milliseconds timeout) = 0;
  virtual void wait() = 0;  // the communicator's timeout
  virtual Path path() const = 0;
  // A dispatch's routing (after wait() for a fresh dispatch); null for a combine.
  virtual std::shared_ptr<const Handle> handle() const = 0;
  // A dispatch, after wait(): received rows per local expert ([num_experts / size]).
  virtual const std::vector<int64_t>& tokens_per_expert() const = 0;
};

struct DispatcherState;  // src/moe/dispatcher_state.h

class Dispatcher {
 public:
  // Collective over the communicator's ranks. `bootstrap` (the same ranks, rank for rank)
  // connects the one-sided windows' fabric. Measures the two paths' costs.
  Dispatcher(std::shared_ptr<Communicator> comm, const Bootstrap& bootstrap,
             const DispatcherOptions& options);
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  int rank() const;
  int size() const;
  const DispatcherOptions& options() const;
  // The path the cost model picks for a fresh dispatch, a repeated one and a combine.
  Path chosen_path(bool fresh_dispatch, bool combine) const;
  // What the model measured, one line (for `plait bench moe`).
  std::string cost_summary() const;

  Layout layout(const int64_t* topk_idx, size_t num_tokens) const;

  // Sends rows of x ([num_tokens][hidden]) to the ranks of their experts (topk_idx
  // [num_tokens][topk], -1 for none); topk_weights may be null. The buffers must stay
  // unchanged until wait() returns.
  std::shared_ptr<Call> dispatch(const void* x, const int64_t* topk_idx,
                                 const float* topk_weights, size_t num_tokens,
                                 RecvAllocator allocate, Path path = Path::kAuto);
  // The same routing as `handle` (backward of a combine): only rows, received into recv_x
  // ([handle.num_recv()][hidden]).
  std::shared_ptr<Call> dispatch(std::shared_ptr<const Handle> handle, const void* x,
                                 void* recv_x, Path path = Path::kAuto);
  // out[t] = sum over the ranks that received token t of y's row for it ([num_recv][hidden]
  // in; [num_tokens][hidden] out), in rank order. With y_weights ([num_recv][topk]) given,
  // out_weights ([num_tokens][topk]) gets their sum likewise: pass non-null pointers for both
  // (even with no rows) on every rank, or null on every rank.
  std::shared_ptr<Call> combine(std::shared_ptr<const Handle> handle, const void* y,
                                const float* y_weights, void* out, float* out_weights,
                                Path path = Path::kAuto);

 private:
  std::shared_ptr<DispatcherState> impl_;
};

}  // namespace plait::moe
