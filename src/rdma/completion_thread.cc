#include "core/log.h"
#include "plait/rdma.h"

namespace plait::rdma {
namespace {

// How long one wait lasts before the thread looks at its stop flag again (stop() also
// interrupts the wait, so this only bounds a lost interrupt).
constexpr std::chrono::milliseconds kStopCheck{100};

}  // namespace

CompletionThread::CompletionThread(CompletionQueue& cq, Handler handler)
    : cq_(cq), handler_(std::move(handler)) {
  thread_ = std::thread([this] {
    Completion c;
    while (!stopping_.load(std::memory_order_acquire)) {
      if (!cq_.wait(&c, kStopCheck)) continue;
      try {
        handler_(c);
      } catch (const std::exception& e) {
        // A library never lets an exception end its host process.
        log(LogLevel::kError, "completion thread: the handler threw: ", e.what());
      }
    }
  });
}

CompletionThread::~CompletionThread() { stop(); }

void CompletionThread::stop() {
  stopping_.store(true, std::memory_order_release);
  cq_.interrupt();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

}  // namespace plait::rdma
