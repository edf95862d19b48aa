// rdma::CompletionThread (plait/rdma.h).
#include "core/log.h"
#include "plait/rdma.h"

namespace plait::rdma {
namespace {

// How long one wait lasts before the thread looks at its stop flag again (stop() also
// interrupts the wait, so this only bounds a lost interrupt).
constexpr std::chrono::milliseconds kStopCheck{100};

}  // namespace

// Held by the thread as well as by the object, so that a handler which destroys the object
// returns into state that still exists; the flag is read before every wait.
struct CompletionThread::Shared {
  std::atomic<bool> stopping{false};
  Handler handler;
};

CompletionThread::CompletionThread(CompletionQueue& cq, Handler handler)
    : cq_(cq), shared_(std::make_shared<Shared>()) {
  shared_->handler = std::move(handler);
  thread_ = std::thread([shared = shared_, &cq] {
    Completion c;
    while (!shared->stopping.load(std::memory_order_acquire)) {
      if (!cq.wait(&c, kStopCheck)) continue;
      try {
        shared->handler(c);
      } catch (const std::exception& e) {
        // A library never lets an exception end its host process.
        log(LogLevel::kError, "completion thread: the handler threw: ", e.what());
      }
    }
  });
}

CompletionThread::~CompletionThread() { stop(); }

void CompletionThread::stop() {
  shared_->stopping.store(true, std::memory_order_release);
  cq_.interrupt();
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id())
    thread_.detach();  // our own handler: it returns, and the loop ends at its flag
  else
    thread_.join();
}

}  // namespace plait::rdma
