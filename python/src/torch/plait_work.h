// The c10d::Work that torch.distributed gets back from the plait process group: one or more
// plait Works (the "parts") plus the steps that finish the call on this rank (copying out of
// staging buffers, a local reduction), and the Future that DDP consumes bucket results through.
//
// A plain call (no steps, no profiler listening) is finished by whoever looks at it: wait(),
// which drives plait's engine itself, isCompleted(), or getFuture() once the call is over.
// Nothing else needs to happen when it completes, so it asks plait for no notice: plait's
// engine thread takes over any call given an on_complete callback, at the cost of a wake-up,
// and the caller's own wait would then compete with it.
//
// A call is "armed" (given on_complete callbacks) when it must complete on its own: it has
// steps (copy-backs that must land even if nobody waits), a profiler range to close at the
// right time, or a Future someone asked for (DDP consumes results that way, never waiting on
// the Work). An armed call is finished by the first of: the thread that arms it, if the call
// is done by then; a thread in wait(); or the group's CompletionThread, told by plait's
// callback (which must not run torch code itself: future callbacks may call back into the
// group). A plain call dropped by Python before it is over keeps its buffers pinned until
// plait is done with them (the destructor arms a callback that only releases them).
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

#include "call_recorder.h"
#include "plait/communicator.h"

namespace plait::torch_backend {

class PlaitWork;

// Finishes calls and runs their futures' callbacks, off plait's engine thread. A pool that
// grows when every thread of it is busy: a callback may start a call and wait for it right
// there (torch's PowerSGD hook does, for its second all_reduce), and that call must still be
// finished by another thread, as it is with gloo's worker threads.
class CompletionThread {
 public:
  CompletionThread();
  ~CompletionThread();
  // Never blocks; after stop() the work is finished in the caller's thread.
  void post(c10::intrusive_ptr<PlaitWork> work);
  // Runs `job` in a thread of the pool and drops it there (what it holds may be tensors,
  // which must not go in plait's engine thread); never blocks; after stop(), runs it in the
  // caller's.
  void post(std::function<void()> job);
  // Finishes what is queued and joins. Called by the process group's destructor; called in a
  // thread of the pool (a future callback released the group), it cannot join that one: it
  // is left an orphan that ends on its own.
  void stop();
  // Blocks until every job posted to any pool of the process has run (at most a minute, then
  // says so on stderr); a job posted or not yet started after that is never run, and what it
  // holds is never freed. Python's exit calls it, without the GIL, before the interpreter
  // finalizes (plait.torch registers it with atexit): a job runs torch code that takes the
  // GIL (a future callback; dropping a tensor whose Python object Python has let go of), and
  // a thread that takes the GIL once the interpreter finalizes is ended by pthread_exit,
  // whose unwinding through a noexcept destructor aborts the process.
  static void finish_jobs_at_exit();

 private:
  // More threads than this are never started: callbacks that block this deep are a bug of
  // theirs (the queue then waits, and the calls' timeouts say so).
  static constexpr int kMaxThreads = 16;
  // What the threads work with, owned jointly by this object and the threads: a thread may
  // drop the last PlaitWork, and with it the last reference to this object (a future
  // callback that released the process group destroyed the group in that thread, which then
  // detached), and it still locks the mutex and reads the queue afterwards.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> queue;
    int threads = 0;  // started, not ended
    int busy = 0;     // running a job
    bool stopping = false;
  };
  static void run(const std::shared_ptr<State>& state);
  void start_thread_locked();
  std::shared_ptr<State> state_;
  std::vector<std::thread> threads_;  // guarded by state_->mu
};

class PlaitWork : public c10d::Work {
 public:
  // `finish_limit` bounds a wait without a timeout of its own once the parts are done (the
  // group's timeout): the wait for whichever thread is finishing the call. While a profiler
  // listens, the call is profiled as `profiling_title` (an async range, as gloo's, with the
  // shapes of `inputs`), from now until it is finished. While plait.torch.timeline records,
  // the call is recorded as one of process group `group` (CallRecorder).
  PlaitWork(int rank, c10d::OpType type, const char* profiling_title,
            const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs,
            std::shared_ptr<CompletionThread> completer, std::weak_ptr<Communicator> comm,
            std::chrono::milliseconds finish_limit, int group);
  ~PlaitWork() override;

  void add_part(WorkPtr part) {
    if (record_) {
      std::lock_guard lock(record_->mu);  // the recording may be stopped meanwhile
      record_->parts.push_back(part);
    }
    parts_.push_back(std::move(part));
  }
  // send/recv: the other end (a group rank) and the tag, for the record.
  void set_peer(int peer, int tag) {
    if (!record_) return;
    std::lock_guard lock(record_->mu);
    record_->peer = peer;
    record_->tag = tag;
  }
  // Keeps a buffer that the parts read or write alive until the call is finished.
  void keep(at::Tensor t) { keep_.push_back(std::move(t)); }
  // Runs on this rank once every part has succeeded, in order.
  void then(std::function<void()> step) { steps_.push_back(std::move(step)); }
  // After the parts, buffers and steps are added: arms the call if it must complete on its
  // own (see above; a call without parts is finished at once).
  static void launch(const c10::intrusive_ptr<PlaitWork>& work);

  // Never blocks: false while another thread is still finishing the call.
  bool isCompleted() override;
  // Deprecated in torch, but they answer as ever: a call that ended shows its outcome here
  // even when nobody has waited on it or polled it yet.
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
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
  [[noreturn]] static void throw_dist_error(const Error& e);
  void open_profiler_range(const char* title, const std::vector<at::Tensor>& inputs);
  // Gives every part an on_complete callback, once; the calling thread counts as a waiter
  // meanwhile and finishes the call itself if it is over by then.
  void arm();
  // Completes the Future, if anyone has asked for it yet, with the call's outcome.
  void complete_future(std::exception_ptr error);

  // Inline room for what a plain collective holds: one part, one buffer.
  c10::SmallVector<WorkPtr, 1> parts_;
  c10::SmallVector<at::Tensor, 1> keep_;
  std::vector<at::Tensor> outputs_;
  std::vector<std::function<void()>> steps_;
  std::atomic<bool> armed_{false};
  std::atomic<size_t> pending_{0};  // parts not done yet, counted once armed
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
  std::shared_ptr<CallRecord> record_;  // while plait.torch.timeline records
};

}  // namespace plait::torch_backend
