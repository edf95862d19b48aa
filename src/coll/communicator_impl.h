// The Communicator behind the public interface: validates each call, turns it into CollArgs
// and buffers, picks the algorithm, and hands it to the CommEngine in issue order.
#pragma once

#include <mutex>
#include <map>
#include <set>
#include <tuple>

#include "coll/engine/block_cache.h"
#include "coll/engine/comm_engine.h"
#include "coll/select/select.h"
#include "coll/stall/stall_inspector.h"
#include "core/config.h"
#include "core/futex_mutex.h"
#include "plait/communicator.h"
#include "transport/providers.h"

namespace plait::coll {

class CommunicatorImpl : public Communicator {
 public:
  CommunicatorImpl(std::shared_ptr<transport::Fabric> fabric,
                   std::shared_ptr<const transport::FabricTopology> topology, uint32_t comm_id,
                   int rank, std::vector<int> fabric_rank, std::shared_ptr<Store> store,
                   Config config, std::chrono::milliseconds timeout);

  int rank() const override { return engine_->rank(); }
  int size() const override { return engine_->size(); }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  WorkPtr allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                    const CallOptions& opts) override;
  WorkPtr reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                 int root, const CallOptions& opts) override;
  WorkPtr broadcast(const void* send, void* recv, size_t count, DataType dtype, int root,
                    const CallOptions& opts) override;
  WorkPtr allgather(const void* send, void* recv, size_t count, DataType dtype,
                    const CallOptions& opts) override;
  WorkPtr allgatherv(const void* send, void* recv, const std::vector<size_t>& recv_counts,
                     DataType dtype, const CallOptions& opts) override;
  WorkPtr reduce_scatter(const void* send, void* recv, size_t recv_count, DataType dtype,
                         ReduceOp op, const CallOptions& opts) override;
  WorkPtr reduce_scatterv(const void* send, void* recv, const std::vector<size_t>& recv_counts,
                          DataType dtype, ReduceOp op, const CallOptions& opts) override;
  WorkPtr alltoall(const void* send, void* recv, size_t count, DataType dtype,
                   const CallOptions& opts) override;
  WorkPtr alltoallv(const void* send, const std::vector<size_t>& send_counts,
                    const std::vector<size_t>& send_displs, void* recv,
                    const std::vector<size_t>& recv_counts,
                    const std::vector<size_t>& recv_displs, DataType dtype,
                    const CallOptions& opts) override;
  WorkPtr gather(const void* send, void* recv, size_t count, DataType dtype, int root,
                 const CallOptions& opts) override;
  WorkPtr scatter(const void* send, void* recv, size_t count, DataType dtype, int root,
                  const CallOptions& opts) override;
  WorkPtr barrier(const CallOptions& opts) override;
  WorkPtr send(const void* buf, size_t count, DataType dtype, int peer, uint32_t tag,
               const CallOptions& opts) override;
  WorkPtr recv(void* buf, size_t count, DataType dtype, int peer, uint32_t tag,
               const CallOptions& opts) override;
  std::shared_ptr<Communicator> split(int color, int key) override;
  std::shared_ptr<Communicator> subgroup(const std::vector<int>& ranks) override;
  ShrinkResult shrink(const CallOptions& opts) override;  // shrink.cc
  void abort(const std::string& reason) override;

 private:
  // Everything about one call that the per-op methods fill in.
  struct Call {
    std::unique_ptr<CollectiveCall> call;  // what enqueue() submits
    CollArgs& args;                        // call->args
    const void* input = nullptr;
    void* output = nullptr;
    size_t input_elems = 0;   // for a stand-in when the caller passed no input buffer
    size_t output_elems = 0;  // likewise for output
    void* avg_data = nullptr;  // set by ops whose kAvg result must be divided
    size_t avg_count = 0;
  };
  // A call of this shape, its arguments filled in with the communicator's.
  Call begin_call(CollOp op, DataType dtype, ReduceOp redop, int root, size_t count);
  WorkPtr enqueue(Call&& call, const CallOptions& opts);
  const Selection& select(const CollArgs& args, const std::string& choice);  // mu_ held
  void check_root(int root, const char* op) const;
  // count * times elements of dtype; throws kInvalidUsage when their byte size overflows (a
  // wrapped product would size every buffer and message wrongly).
  // Inline: every call checks, and the checks cost a few instructions where the call did.
  size_t checked_elems(size_t count, size_t times, DataType dtype, const char* op) const {
    size_t elems = 0, bytes = 0;
    if (static_cast<unsigned>(dtype) > static_cast<unsigned>(DataType::kI64)) [[unlikely]]
      throw_unknown(op, "dtype", static_cast<unsigned>(dtype));
    if (__builtin_mul_overflow(count, times, &elems) ||
        __builtin_mul_overflow(elems, dtype_size(dtype), &bytes) ||
        bytes > static_cast<size_t>(PTRDIFF_MAX)) [[unlikely]]
      throw_too_large(count, times, dtype, op);
    return elems;
  }
  // The sum of per-rank counts, checked likewise.
  size_t checked_sum(const std::vector<size_t>& counts, DataType dtype, const char* op) const;
  int64_t draw_comm_id();
  Error comm_ids_exhausted(const char* op) const;
  void check_buffer(const void* p, size_t elems, const char* what, const char* op) const {
    if (p == nullptr && elems > 0) [[unlikely]]
      throw_null_buffer(elems, what, op);
  }
  [[noreturn, gnu::cold]] void throw_too_large(size_t count, size_t times, DataType dtype,
                                               const char* op) const;
  [[noreturn, gnu::cold]] void throw_null_buffer(size_t elems, const char* what,
                                                 const char* op) const;
  // A DataType or ReduceOp outside its enum (a cast from an integer, a newer caller).
  [[noreturn, gnu::cold]] void throw_unknown(const char* op, const char* what,
                                             unsigned value) const;
  std::chrono::milliseconds timeout_for(const CallOptions& opts) const {
    return opts.timeout.count() > 0 ? opts.timeout : timeout_;
  }
  // Work::wait() without an argument outlasts the operation's own deadline a little, so the
  // engine's precise error (what it still waited for, from whom) arrives first.
  static std::chrono::milliseconds wait_limit(std::chrono::milliseconds op_timeout) {
    return op_timeout + std::chrono::seconds(5);
  }

  std::shared_ptr<const transport::FabricTopology> topology_;  // of the whole fabric
  std::vector<int> host_of_;  // per member: host index (CollArgs::host_of); empty: one host
  std::shared_ptr<CommEngine> engine_;
  const uint32_t comm_id_;
  std::shared_ptr<Store> store_;
  Config config_;
  std::chrono::milliseconds timeout_;
  CostParams cost_;
  uint64_t segment_slot_bytes_ = 0;  // nonzero: the engine has a collective segment
  bool host_segments_ = false;       // CollArgs::host_segments
  FutexMutex mu_;  // orders calls: sequence numbers follow issue order
  uint64_t seq_ = 0;
  std::set<std::tuple<int, int, size_t, int>> logged_;  // (op, dtype, count, algo) already logged
  // (op, dtype, redop, root, count, in_place, the call's algorithm choice) -> selection
  using SelectionKey = std::tuple<int, int, int, int, size_t, bool, std::string>;
  // The selection caches; guarded by mu_.
  std::map<SelectionKey, std::shared_ptr<const Selection>> selections_;
  Selection v_selection_;  // the last call with per-rank counts (not cached)
  SelectionKey last_selection_key_;
  std::shared_ptr<const Selection> last_selection_;
  // subgroup(): how many groups of each member list this rank has made (the n-th one of a
  // list is the same group on every member).
  std::mutex subgroup_mu_;
  std::map<std::vector<int>, int> subgroups_made_;
  int shrinks_made_ = 0;  // guarded by subgroup_mu_; numbers this rank's shrink() calls
  std::unique_ptr<StallWatchHandle> stall_watch_;  // null when PLAIT_STALL_WARN=0
};

}  // namespace plait::coll
