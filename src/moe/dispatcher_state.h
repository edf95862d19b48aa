// What a Dispatcher holds, shared by its calls (src/moe/calls.cc) and its cost model
// (src/moe/path_cost.cc).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "moe/path_cost.h"
#include "moe/routing.h"
#include "moe/window_exchange.h"
#include "plait/communicator.h"
#include "plait/moe.h"

namespace plait::moe {

struct DispatcherState {
  std::shared_ptr<Communicator> comm;
  DispatcherOptions options;
  Shape shape;
  int rank = 0;
  std::unique_ptr<WindowExchange> windows;
  PathCosts costs;
  Path forced = Path::kAuto;  // options.path or PLAIT_MOE_PATH
  // Reused between calls: what this rank sends (packed rows and meta), and what a combine
  // over the alltoallv path receives before it sums.
  std::vector<std::byte> send_rows, send_meta, staged;
  bool busy = false;    // a call is in flight
  std::string broken;   // why an earlier call left the dispatcher unusable

  size_t row_bytes() const { return shape.row_bytes; }
  // Claims the dispatcher for a call; throws if one is in flight or an earlier one failed.
  void begin(const char* op);
  Path resolve(Path asked, CallKind kind) const;
  ErrorContext context(const char* op) const { return {.rank = rank, .op = op}; }
};

// Calls, started by the Dispatcher's methods.
std::shared_ptr<Call> start_fresh_dispatch(std::shared_ptr<DispatcherState> impl, Path path,
                                           const void* x, const int64_t* topk_idx,
                                           const float* topk_weights, size_t num_tokens,
                                           RecvAllocator allocate);
std::shared_ptr<Call> start_repeat_dispatch(std::shared_ptr<DispatcherState> impl, Path path,
                                            std::shared_ptr<const Handle> handle, const void* x, void* recv_x);
std::shared_ptr<Call> start_combine(std::shared_ptr<DispatcherState> impl, Path path,
                                    std::shared_ptr<const Handle> handle, const void* y, const float* y_weights,
                                    void* out, float* out_weights);

}  // namespace plait::moe
