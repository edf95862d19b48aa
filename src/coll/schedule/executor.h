// Runs one rank's Schedule on a Fabric: issues every step whose dependencies are done,
// sends and receives through the transport, combines received data with the reduction
// kernels, and checks every incoming message's signature. Driven by the communicator's
// engine thread: start(), then on_completion() for each completion it routes here.
// Not thread-safe; one engine thread owns a run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coll/schedule/schedule.h"
#include "coll/schedule/signature.h"
#include "transport/fabric.h"

namespace plait::coll {

struct ExecBuffers {
  void* input = nullptr;
  void* output = nullptr;
  void* scratch = nullptr;
};

// The communicator-level facts a run needs to talk to its peers.
struct ExecPeers {
  transport::Fabric* fabric = nullptr;
  transport::CompletionQueue* cq = nullptr;
  const std::vector<int>* fabric_rank = nullptr;  // communicator rank -> fabric rank
  uint32_t comm_id = 0;
  std::vector<uint64_t>* sent = nullptr;      // per peer: collective messages sent so far
  std::vector<uint64_t>* received = nullptr;  // per peer: collective messages received so far
};

class ScheduleExecutor {
 public:
  // `context_base` is or-ed into every transport context this run uses; the low 32 bits
  // carry the step index.
  ScheduleExecutor(const Schedule& schedule, ExecBuffers buffers, const Signature& signature,
                   const ExecPeers& peers, int rank, uint64_t context_base);
  // Starts over on another schedule, keeping the memory of the per-step tables (an engine
  // reuses one executor for every collective, so a small one allocates nothing).
  void reset(const Schedule& schedule, ExecBuffers buffers, const Signature& signature,
             const ExecPeers& peers, int rank, uint64_t context_base);

  // Issues the first steps. Errors (e.g. a transport refusing a call) end the run.
  void start();
  void on_completion(const transport::Completion& completion);

  bool done() const { return error_ != nullptr || completed_ == schedule_->steps.size(); }
  const std::shared_ptr<const Error>& error() const { return error_; }
  // For timeout messages: what the run still waits for, e.g. "recv from rank 2 (4096 bytes)".
  std::string waiting_for() const;
  // Ranks this run still waits on (for the error context of a timeout).
  int first_waited_peer() const;

 private:
  void issue(StepId id);
  void complete(StepId id);
  void fail(Error error);
  void make_ready(StepId id);
  void run_ready();
  char* address(const Slice& slice) const;
  size_t bytes(const Slice& slice) const { return slice.count * elem_; }

  const Schedule* schedule_;
  ExecBuffers buffers_;
  Signature signature_;
  uint64_t signature_word_;
  ExecPeers peers_;
  int rank_;
  uint64_t context_base_;
  size_t elem_;

  std::vector<uint32_t> missing_deps_;            // per step: dependencies not yet done
  std::vector<std::vector<StepId>> dependents_;  // per step: steps that wait for it
  std::vector<uint64_t> message_index_;           // per send/recv step: its pair message index
  std::vector<uint8_t> state_;                    // per step: 0 waiting, 1 issued, 2 done
  std::vector<StepId> ready_;  // a min-heap of step ids
  size_t completed_ = 0;
  std::shared_ptr<const Error> error_;
};

}  // namespace plait::coll
