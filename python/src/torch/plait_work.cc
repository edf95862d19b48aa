#include "plait_work.h"

#include <ATen/ThreadLocalState.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>

#include <cstdio>

#include "plait/error.h"

namespace plait::torch_backend {

namespace {

// Every job of every pool, counted from post() until it has run and been dropped:
// process-wide because the interpreter they must not outlive is. Never destroyed: a pool
// thread may still end when static objects are destroyed at exit (a program that exits
// without finalizing Python).
struct Jobs {
  std::mutex mu;
  std::condition_variable cv;
  int pending = 0;
  bool exiting = false;  // finish_jobs_at_exit() has returned
};

Jobs& jobs() {
  static auto* const jobs = new Jobs;
  return *jobs;
}

// What a job holds may be tensors, and freeing them may take the GIL: at exit it is kept.
void abandon(std::function<void()> job) {
  static_cast<void>(new std::function<void()>(std::move(job)));
}

}  // namespace

CompletionThread::CompletionThread() : state_(std::make_shared<State>()) {
  std::lock_guard lock(state_->mu);
  start_thread_locked();
}

CompletionThread::~CompletionThread() { stop(); }

void CompletionThread::start_thread_locked() {
  ++state_->threads;
  threads_.emplace_back([state = state_] { run(state); });
}

void CompletionThread::post(c10::intrusive_ptr<PlaitWork> work) {
  post(std::function<void()>([work = std::move(work)] { work->finish_call(); }));
}

void CompletionThread::post(std::function<void()> job) {
  {
    std::lock_guard lock(state_->mu);
    if (!state_->stopping) {
      {
        std::lock_guard count(jobs().mu);
        if (jobs().exiting) return abandon(std::move(job));
        ++jobs().pending;
      }
      state_->queue.push_back(std::move(job));
      // Every thread busy (perhaps blocked in a callback on a call this job finishes): one more.
      if (state_->busy + static_cast<int>(state_->queue.size()) > state_->threads &&
          state_->threads < kMaxThreads)
        start_thread_locked();
      state_->cv.notify_one();
      return;
    }
  }
  {
    std::lock_guard count(jobs().mu);
    if (jobs().exiting) return abandon(std::move(job));
  }
  job();
}

void CompletionThread::stop() {
  // The last reference may go in a thread of the pool (a finished work's callback); that
  // thread keeps its State, finishes its queue and ends on its own (finish_jobs_at_exit
  // counts its jobs).
  const auto me = std::this_thread::get_id();
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(state_->mu);
    if (state_->stopping) return;
    state_->stopping = true;
    threads.swap(threads_);
  }
  state_->cv.notify_all();
  for (auto& t : threads) {
    if (t.get_id() == me)
      t.detach();
    else if (t.joinable())
      t.join();
  }
}

void CompletionThread::finish_jobs_at_exit() {
  // A job finishes a call that is already over (its copy-backs and future callbacks), so
  // this is short; giving up brings back the abort it prevents. A user callback that never
  // returns would hold the exit forever: after a minute we say so, and exit anyway.
  Jobs& j = jobs();
  std::unique_lock lock(j.mu);
  if (!j.cv.wait_for(lock, std::chrono::seconds(60), [&] { return j.pending == 0; }))
    std::fprintf(stderr,
                 "plait: %d torch completion job(s) still running or queued 60 s into "
                 "Python's exit; exiting without them\n",
                 j.pending);
  j.exiting = true;
}

void CompletionThread::run(const std::shared_ptr<State>& state) {
  std::unique_lock lock(state->mu);
  for (;;) {
    // Idle until there is a call to finish or stop(), which always notifies: the threads'
    // rest state, which no caller waits on, so it needs no deadline.
    state->cv.wait(lock, [&] { return state->stopping || !state->queue.empty(); });
    if (state->queue.empty()) break;
    auto job = std::move(state->queue.front());
    state->queue.pop_front();
    ++state->busy;
    lock.unlock();
    bool exiting;
    {
      std::lock_guard count(jobs().mu);
      exiting = jobs().exiting;
    }
    if (exiting)
      abandon(std::move(job));
    else
      job();
    job = nullptr;  // may destroy the CompletionThread object, never `state`
    {
      std::lock_guard count(jobs().mu);
      if (--jobs().pending == 0) jobs().cv.notify_all();
    }
    lock.lock();
    --state->busy;
  }
  --state->threads;
}

namespace {

// plait's errors reach Python as torch's DistBackendError (a RuntimeError), as the built-in
// backends' do, with plait's message: rank, peer, operation and bytes.
std::exception_ptr as_dist_error(const Error& e) {
  return std::make_exception_ptr(c10::DistBackendError({__func__, __FILE__, __LINE__}, e.what()));
}

// The call as messages name it; the profiling title may be the base operation's instead
// (an all_reduce_coalesced is profiled as "plait:all_reduce", as gloo does).
const char* op_of(c10d::OpType type) {
  switch (type) {
    case c10d::OpType::BROADCAST: return "broadcast";
    case c10d::OpType::ALLREDUCE: return "all_reduce";
    case c10d::OpType::ALLREDUCE_COALESCED: return "all_reduce_coalesced";
    case c10d::OpType::REDUCE: return "reduce";
    case c10d::OpType::ALLGATHER: return "all_gather";
    case c10d::OpType::_ALLGATHER_BASE: return "all_gather_into_tensor";
    case c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED: return "all_gather_into_tensor_coalesced";
    case c10d::OpType::ALLGATHER_COALESCED: return "all_gather_coalesced";
    case c10d::OpType::GATHER: return "gather";
    case c10d::OpType::SCATTER: return "scatter";
    case c10d::OpType::REDUCE_SCATTER: return "reduce_scatter";
    case c10d::OpType::_REDUCE_SCATTER_BASE: return "reduce_scatter_tensor";
    case c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED: return "reduce_scatter_tensor_coalesced";
    case c10d::OpType::ALLTOALL_BASE:
    case c10d::OpType::ALLTOALL: return "all_to_all";
    case c10d::OpType::SEND: return "send";
    case c10d::OpType::RECV: return "recv";
    case c10d::OpType::RECVANYSOURCE: return "recvAnySource";
    case c10d::OpType::BARRIER: return "barrier";
    default: return "call";
  }
}

}  // namespace

PlaitWork::PlaitWork(int rank, c10d::OpType type, const char* profiling_title,
                     const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs,
                     std::shared_ptr<CompletionThread> completer,
                     std::weak_ptr<Communicator> comm, std::chrono::milliseconds finish_limit,
                     int group)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      op_(op_of(type)),
      finish_limit_(finish_limit),
      completer_(std::move(completer)),
      comm_(std::move(comm)) {
  open_profiler_range(profiling_title, inputs);
  if (CallRecorder::recording()) {
    int64_t in = 0, out = 0;
    for (const auto& t : inputs) in += static_cast<int64_t>(t.nbytes());
    for (const auto& t : outputs_) out += static_cast<int64_t>(t.nbytes());
    record_ = CallRecorder::open(op_, group, std::max(in, out));
  }
}

PlaitWork::~PlaitWork() {
  if (armed_.load() || finished_.load() || parts_.empty()) return;
  // Dropped before anyone saw the call end: plait may still be reading or writing these
  // buffers. Each part's callback hands its share to the completion thread, so the last
  // reference never goes in plait's engine thread.
  struct Pinned {
    c10::SmallVector<at::Tensor, 1> buffers;
    std::shared_ptr<CompletionThread> completer;
  };
  auto pinned = std::make_shared<Pinned>(Pinned{std::move(keep_), completer_});
  for (auto& part : parts_) {
    part->on_complete([pinned]() mutable {
      CompletionThread& completer = *pinned->completer;
      completer.post(std::function<void()>([pinned = std::move(pinned)] {}));
    });
  }
}

// What c10d::Work's constructor does with a title, but only while a profiler listens: torch
// 1.13's allocates a RecordFunction and copies the inputs for every call, profiled or not.
// Work::finish() closes the range.
void PlaitWork::open_profiler_range(const char* title,
                                    const std::vector<at::Tensor>& inputs) {
  auto callbacks = at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE);
  if (!callbacks) return;
  auto range = std::make_shared<at::RecordFunction>(std::move(*callbacks));
  // Finished by whichever thread completes the call, so not a scope of this thread's stack.
  range->_setAsync();
  const std::vector<c10::IValue> shapes(inputs.begin(), inputs.end());
  range->before(title, c10::ArrayRef<const c10::IValue>(shapes.data(), shapes.size()));
  std::function<void()> end = [range] { range->end(); };
  recordFunctionEndCallback_ = at::wrapPropagateTLSState(std::move(end));
}

c10::intrusive_ptr<c10::ivalue::Future> PlaitWork::getFuture() {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  bool due = false;
  std::exception_ptr error;
  {
    std::lock_guard lock(future_mu_);
    if (!future_) {
      future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
      due = future_due_;
      error = future_error_;
    }
    future = future_;
  }
  // Outside the lock: completing runs the Future's callbacks (none yet, it is new).
  if (due) {
    if (error)
      future->setError(error);
    else
      future->markCompleted(c10::IValue(outputs_));
  } else {
    // Whoever holds the Future may never wait on the Work: from now on the call completes
    // on its own.
    arm();
  }
  return future;
}

void PlaitWork::complete_future(std::exception_ptr error) {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard lock(future_mu_);
    future_due_ = true;
    future_error_ = error;
    future = future_;
  }
  if (!future) return;
  if (error)
    future->setError(error);
  else
    future->markCompleted(c10::IValue(outputs_));
}

void PlaitWork::launch(const c10::intrusive_ptr<PlaitWork>& work) {
  if (work->parts_.empty() || !work->steps_.empty() || work->recordFunctionEndCallback_)
    work->arm();
}

void PlaitWork::arm() {
  if (armed_.exchange(true)) return;
  pending_ = parts_.size();
  // The arming thread counts as a waiter: a small call often completes while it is being
  // started (the caller drives the engine), and finishing it here costs far less than
  // waking the completion thread for it.
  ++waiters_;
  for (auto& part : parts_) {
    part->on_complete([w = c10::intrusive_ptr<PlaitWork>::reclaim_copy(this)] {
      if (--w->pending_ == 0 && w->waiters_.load() == 0) w->completer_->post(w);
    });
  }
  if (--waiters_ == 0 && pending_.load() == 0) finish_call();
}

void PlaitWork::finish_call() {
  try_finish(std::chrono::steady_clock::time_point::max());
}

PlaitWork::Finish PlaitWork::try_finish(std::chrono::steady_clock::time_point deadline) {
  std::exception_ptr error;
  {
    std::unique_lock lock(finish_mu_, std::defer_lock);
    if (deadline == std::chrono::steady_clock::time_point::max())
      lock.lock();
    else if (!lock.try_lock_until(deadline))
      return Finish::kBusy;
    if (finished_) return Finish::kDone;
    for (auto& part : parts_) {
      if (!part->test()) return Finish::kNotYet;  // whoever sees the last part done finishes
      if (auto e = part->error(); e && !error) error = as_dist_error(*e);
    }
    if (!error) {
      try {
        for (auto& step : steps_) step();
      } catch (...) {
        error = std::current_exception();
      }
    }
    finished_ = true;
    keep_.clear();
    steps_.clear();
  }
  // Outside the lock: Future callbacks may wait on this very Work or start new calls.
  finish(error);
  complete_future(error);
  return Finish::kDone;
}

bool PlaitWork::isCompleted() {
  {
    std::lock_guard lock(mutex_);
    if (completed_) return true;
  }
  for (auto& part : parts_)
    if (!part->test()) return false;
  // A thread that holds the call is finishing it (possibly copying a large result): "not
  // yet" rather than waiting for it.
  if (try_finish(std::chrono::steady_clock::now()) != Finish::kDone) return false;
  std::lock_guard lock(mutex_);
  return completed_;
}

// A plain call is finished by whoever looks at it (see plait_work.h): these look too. The
// Work is never a const object; torch's signatures are const.
bool PlaitWork::isSuccess() const {
  const_cast<PlaitWork*>(this)->isCompleted();
  return c10d::Work::isSuccess();
}

std::exception_ptr PlaitWork::exception() const {
  const_cast<PlaitWork*>(this)->isCompleted();
  return c10d::Work::exception();
}

int PlaitWork::sourceRank() const {
  TORCH_CHECK(!parts_.empty(), "sourceRank() is only for receives");
  return parts_.front()->source();
}

std::vector<at::Tensor> PlaitWork::result() { return outputs_; }

void PlaitWork::give_up(std::chrono::milliseconds waited, const char* what) const {
  throw_dist_error(timeout_error("Timed out after " + std::to_string(waited.count()) +
                          " ms waiting for the call to finish: " + what +
                          "; the call goes on and a later wait() may still see it complete",
                      {.rank = rank_, .op = op_}));
}

void PlaitWork::throw_dist_error(const Error& e) { std::rethrow_exception(as_dist_error(e)); }

bool PlaitWork::wait(std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  {
    // Finished already (when it was armed, or by another waiter or the completion thread):
    // no clock, no bookkeeping.
    std::lock_guard lock(mutex_);
    if (completed_) {
      if (exception_) std::rethrow_exception(exception_);
      return true;
    }
  }
  ++waiters_;
  struct Leave {
    PlaitWork* w;
    int64_t began_ns = w->record_ ? CallRecorder::now_ns() : 0;
    ~Leave() {
      if (w->record_) {
        const int64_t end = CallRecorder::now_ns();
        std::lock_guard lock(w->record_->mu);
        w->record_->waits.emplace_back(began_ns, end);
      }
      // The last part may have completed while this thread was inside: if it gave up before
      // finishing the call (its own time limit), hand the call to the completion thread.
      // Never blocks: posting a call that is being finished meanwhile is harmless.
      if (--w->waiters_ == 0 && w->armed_.load() && w->pending_.load() == 0 &&
          !w->finished_.load())
        w->completer_->post(c10::intrusive_ptr<PlaitWork>::reclaim_copy(w));
    }
  } leave{this};
  const bool bounded = timeout.count() > 0;
  const auto start = Clock::now();
  const auto until = start + timeout;
  for (auto& part : parts_) {
    try {
      if (!bounded) {
        part->wait();  // bounded too: a little past the operation's own deadline
      } else {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
        part->wait(std::max(left, std::chrono::milliseconds(1)));
      }
    } catch (const Error& e) {
      if (!part->test()) throw_dist_error(e);  // this wait's own limit: the call goes on
      // The part failed; the communicator aborts and fails the others at once. Wait for them
      // all anyway: the call is finished only when every part is done.
    }
  }
  // Every part is done; what is left is running the steps here, or waiting for the thread
  // that runs them (the completion thread, or another waiter).
  const auto deadline = bounded ? until : Clock::now() + finish_limit_;
  auto waited = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  };
  if (try_finish(deadline) == Finish::kBusy)
    give_up(waited(), "another thread is still finishing it (copying results into place)");
  std::unique_lock lock(mutex_);
  if (!cv_.wait_until(lock, deadline, [&] { return completed_; }))
    give_up(waited(), "the thread that finished it has not marked it complete yet");
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

void PlaitWork::abort() {
  if (auto comm = comm_.lock())
    comm->abort("torch.distributed Work.abort() on rank " + std::to_string(rank_));
}

}  // namespace plait::torch_backend
