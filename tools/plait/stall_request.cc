#include "stall_request.h"

#include "coll/stall/stall_inspector.h"
#include "plait/error.h"
#include "plait/store.h"

namespace plait::cli {
namespace {

// Inspectors look every second at most, and the one gathering the states waits up to 4 s.
constexpr auto kReplyWait = std::chrono::seconds(10);

}  // namespace

StallRequests::StallRequests(std::string host, int port, std::string token,
                             std::function<void(const std::string&)> print)
    : host_(std::move(host)), port_(port), token_(std::move(token)), print_(std::move(print)) {}

StallRequests::~StallRequests() {
  if (thread_.joinable()) thread_.join();
}

void StallRequests::request() {
  if (busy_.exchange(true)) {
    print_("SIGUSR1: a stall report is still being gathered");
    return;
  }
  if (thread_.joinable()) thread_.join();
  thread_ = std::thread([this] {
    run();
    busy_.store(false);
  });
}

void StallRequests::run() {
  try {
    auto store = connect_tcp_store(host_, port_, token_, std::chrono::seconds(5));
    const int64_t n = store->add(coll::kInspectRequestKey, 1);
    print_("SIGUSR1: asking the ranks for a stall report (request " + std::to_string(n) + ")");
    print_("stall report, " + store->get_string(coll::inspect_reply_key(n), kReplyWait));
  } catch (const Error& e) {
    print_("SIGUSR1: no stall report: " + std::string(e.what()) +
           " (no rank has a communicator, or PLAIT_STALL_WARN=0)");
  }
}

}  // namespace plait::cli
