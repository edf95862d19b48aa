// The "plait" backend of torch.distributed: a c10d::Backend (torch 2.x: the ProcessGroup that
// users hold dispatches each CPU call to it) kept thin over one plait Communicator. Each call
// checks its tensors, starts plait operations and returns a PlaitWork; nothing blocks except
// wait().
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "plait/communicator.h"
#include "plait_work.h"
#include "tensors.h"

namespace plait::torch_backend {

class PlaitProcessGroup : public c10d::Backend {
 public:
  PlaitProcessGroup(std::shared_ptr<Communicator> comm, std::chrono::milliseconds timeout);
  ~PlaitProcessGroup() override;

  // Collective over the group's ranks: a new plait communicator bootstrapped from torch's store.
  static c10::intrusive_ptr<PlaitProcessGroup> create(c10::intrusive_ptr<c10d::Store> store,
                                                      int rank, int size,
                                                      std::chrono::milliseconds timeout);
  // new_group: the members (this group's ranks, in the new group's order) share this group's
  // connections; only they call.
  c10::intrusive_ptr<PlaitProcessGroup> subgroup(const std::vector<int>& ranks,
                                                 std::chrono::milliseconds timeout);

  const std::string getBackendName() const override { return "plait"; }
  // The group's communicator, and a bootstrap of its ranks (rank for rank) over torch's store,
  // scoped to the group: what plait services beside the group (plait.torch.moe) connect with.
  std::shared_ptr<Communicator> communicator() const { return comm(); }
  const Bootstrap& bootstrap() const { return bootstrap_; }
  // Names this group in the calls plait.torch.timeline records (unique in the process).
  int group_id() const { return group_id_; }
  std::chrono::milliseconds timeout() const { return timeout_.load(); }
  // Calls started afterwards default to `timeout` (a call's own option still wins).
  void setTimeout(std::chrono::milliseconds timeout) override { timeout_.store(timeout); }
  c10::intrusive_ptr<Options> getBackendOptions() override;

  // split_group: the members of `ranks` (this group's ranks, in the new group's order) share
  // this group's connections, as new_group's do; only they call.
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  // Ends every call in flight and every later one with an error naming this rank, and tells
  // the peers, whose calls on this group fail too.
  void abort() override;
  // Refuses later calls and releases the communicators (a call still in flight fails).
  void shutdown() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single(at::Tensor& output, at::Tensor& input,
                                                   const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_to_all_single(at::Tensor& output, at::Tensor& input,
                                                   std::vector<int64_t>& output_splits,
                                                   std::vector<int64_t>& input_splits,
                                                   const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  // Every rank counts its collectives from 0, so the numbers agree without an exchange.
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }

 private:
  c10::intrusive_ptr<PlaitWork> make_work(c10d::OpType type, const char* title,
                                          const std::vector<at::Tensor>& inputs,
                                          std::vector<at::Tensor> outputs);
  CallOptions options(std::chrono::milliseconds op_timeout) const;
  CallName what(const char* op) const { return {rank_, op}; }
  // The communicators, refused once the group is shut down (they are released then).
  const std::shared_ptr<Communicator>& comm() const;
  const std::shared_ptr<Communicator>& control() const;
  // Every rank's `inputs` packed back to back, gathered by one plait allgather into the
  // returned buffer (rank r's bytes at r's place), kept alive by `work`.
  at::Tensor allgather_packed(PlaitWork& work, const std::vector<at::Tensor>& inputs,
                              const CallOptions& call);
  // Reduction through an allgather and a local reduce, for types and operators plait lacks.
  void fallback_allreduce(PlaitWork& work, const at::Tensor& buffer, const c10d::ReduceOp& op,
                          const CallOptions& call);
  c10::intrusive_ptr<c10d::Work> sparse_allreduce(at::Tensor& tensor,
                                                  const c10d::AllreduceOptions& opts);
  c10::intrusive_ptr<c10d::Work> point_to_point(std::vector<at::Tensor>& tensors, int peer,
                                                int tag, bool is_send, const char* title,
                                                c10d::OpType type);

  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<Communicator> control_;
  Bootstrap bootstrap_;  // monitoredBarrier's probes, apart from user traffic
  std::atomic<std::chrono::milliseconds> timeout_;
  std::shared_ptr<CompletionThread> completer_;
  std::atomic<uint64_t> seq_{0};
  std::atomic<bool> shut_down_{false};
  const int group_id_ = CallRecorder::next_group_id();
};

}  // namespace plait::torch_backend
