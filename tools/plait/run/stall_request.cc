#include "plait/run/stall_request.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "coll/stall/stall_inspector.h"
#include "plait/error.h"
#include "plait/store.h"

namespace plait::cli {
namespace {

// Inspectors look every second at most, and the one gathering the states waits up to 4 s.
constexpr auto kReplyWait = std::chrono::seconds(10);

// `text` into `path`, whole or not at all for a reader (a temporary file, then rename).
void write_whole(const std::string& path, const std::string& text) {
  const std::string temp = path + ".new";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw system_error("cannot write '" + temp + "'", errno);
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int saved = errno;
  ::close(fd);
  if (!written) throw system_error("cannot write '" + temp + "'", saved);
  if (::rename(temp.c_str(), path.c_str()) != 0) throw system_error("cannot rename '" + temp + "'", errno);
}

}  // namespace

StallRequests::StallRequests(std::string host, int port, std::string token,
                             std::function<void(const std::string&)> print)
    : host_(std::move(host)), port_(port), token_(std::move(token)), print_(std::move(print)) {
  const char* dir = std::getenv("TMPDIR");
  std::string pattern = std::string(dir && *dir ? dir : "/tmp") + "/plait-stall-requests-XXXXXX";
  const int fd = ::mkstemp(pattern.data());
  if (fd < 0) throw system_error("plait run: cannot create the stall-request file '" + pattern + "'", errno);
  ::close(fd);
  path_ = pattern;
}

StallRequests::~StallRequests() {
  if (thread_.joinable()) thread_.join();
  ::unlink(path_.c_str());
  ::unlink((path_ + ".new").c_str());
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
    const int64_t n = ++requests_;
    write_whole(path_, std::to_string(n) + "\n");
    print_("SIGUSR1: asking the ranks for a stall report (request " + std::to_string(n) + ")");
    auto store = connect_tcp_store(host_, port_, token_, std::chrono::seconds(5));
    print_("stall report, " + store->get_string(coll::inspect_reply_key(n), kReplyWait));
  } catch (const Error& e) {
    print_("SIGUSR1: no stall report: " + std::string(e.what()) +
           " (no rank has a communicator, or PLAIT_STALL_WARN=0)");
  }
}

}  // namespace plait::cli
