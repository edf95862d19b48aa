// The c10d::Work that torch.distributed gets back from the plait process group: one or more
// plait Works (the "parts") plus the steps that finish the call on this rank (copying out of
// staging buffers, a local reduction), and the Future that DDP consumes bucket results through.
//
// Completion has three routes, whichever comes first:
//  - the call completes while it is being launched (a small call often does: the caller
//    drives plait's engine), and the launching thread finishes it in place;
//  - a thread in wait() drives plait's engine itself (no hand-off), then finishes the call
//    in place;
//  - otherwise plait tells the group's CompletionThread (plait's on_complete callback must
//    not run torch code, and future callbacks may call back into the group), which finishes
//    the call and completes the Future.
//
// A call costs what torch.distributed asks of it and no more: the Future is made when someone
// asks for it, and the profiler range is opened only while a profiler listens.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "plait/communicator.h"

namespace plait::torch_backend {

class PlaitWork;

class CompletionThread {
 public:
  CompletionThread();
  ~CompletionThread();
  // Never blocks; after stop() the work is finished in the caller's thread.
  void post(c10::intrusive_ptr<PlaitWork> work);
  // Finishes what is queued and joins. Called by the process group's destructor.
  void stop();

 private:
  // What the thread works with, owned jointly by this object and the thread: the thread may
  // drop the last PlaitWork, and with it the last reference to this object (a future
  // callback that released the process group destroyed the group in this thread, which
  // then detached), and it still locks the mutex and reads the queue afterwards.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<c10::intrusive_ptr<PlaitWork>> queue;
    bool stopping = false;
  };
  static void run(const std::shared_ptr<State>& state);
  std::shared_ptr<State> state_;
  std::thread thread_;
};

class PlaitWork : public c10d::Work {
 public:
  // `finish_limit` bounds a wait without a timeout of its own once the parts are done (the
  // group's timeout): the wait for whichever thread is finishing the call. While a profiler
  // listens, the call is profiled as `profiling_title` (an async range, as gloo's, with the
  // shapes of `inputs`), from now until it is finished.
  PlaitWork(int rank, c10d::OpType type, const char* profiling_title,
            const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs,
            std::shared_ptr<CompletionThread> completer, std::weak_ptr<Communicator> comm,
            std::chrono::milliseconds finish_limit);
  ~PlaitWork() override;

  void add_part(WorkPtr part) { parts_.push_back(std::move(part)); }
  // Keeps a buffer that the parts read or write alive until the call is finished.
  void keep(at::Tensor t) { keep_.push_back(std::move(t)); }
  // Runs on this rank once every part has succeeded, in order.
  void then(std::function<void()> step) { steps_.push_back(std::move(step)); }
  // After the parts are added: arms completion (finishes at once when there are none).
  static void launch(const c10::intrusive_ptr<PlaitWork>& work);

  // Never blocks: false while another thread is still finishing the call.
  bool isCompleted() override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  // Bounded by `timeout`, or without one by the parts' own deadlines and then
  // `finish_limit`; giving up throws a kTimeout plait::Error naming the rank and the call.
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override {}
  void abort() override;
  // Completed with result() or the call's error once the call is finished.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Runs the steps and completes the Work and its Future, once; only when all parts are done.
  void finish_call();

 private:
  enum class Finish { kDone, kNotYet, kBusy };
  // finish_call, giving up with kBusy when another thread holds the call past `deadline`.
  Finish try_finish(std::chrono::steady_clock::time_point deadline);
  [[noreturn]] void give_up(std::chrono::milliseconds waited, const char* what) const;
  void open_profiler_range(const char* title, const std::vector<at::Tensor>& inputs);
  // Completes the Future, if anyone has asked for it yet, with the call's outcome.
  void complete_future(std::exception_ptr error);

  // Inline room for what a plain collective holds: one part, one buffer.
  c10::SmallVector<WorkPtr, 1> parts_;
  c10::SmallVector<at::Tensor, 1> keep_;
  std::vector<at::Tensor> outputs_;
  std::vector<std::function<void()>> steps_;
  std::atomic<size_t> pending_{0};
  // Threads inside wait(): they finish the call themselves, so the completion thread is not
  // woken for a call somebody waits on (a wake-up costs more than a small collective).
  std::atomic<int> waiters_{0};
  // Held while a thread checks the parts and runs the steps (which may copy a large result):
  // timed, so that a waiter with a deadline can give up on it.
  std::timed_mutex finish_mu_;
  std::atomic<bool> finished_{false};  // written under finish_mu_, read without it
  const char* const op_;               // "all_reduce", for messages
  const std::chrono::milliseconds finish_limit_;
  // Made by the first getFuture(); whoever comes second of getFuture() and the end of the
  // call completes it, so it is completed exactly once.
  std::mutex future_mu_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  bool future_due_ = false;  // the call is finished: a new Future is made completed
  std::exception_ptr future_error_;
  std::shared_ptr<CompletionThread> completer_;
  // Not owned: the last reference to a communicator must not go in its own engine thread,
  // where plait's completion callbacks run.
  std::weak_ptr<Communicator> comm_;
};

}  // namespace plait::torch_backend
