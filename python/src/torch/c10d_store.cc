#include "c10d_store.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "plait/error.h"

namespace plait::torch_backend {
namespace {

std::string joined(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "" : ", ") + k;
  return s;
}

// c10d stores report failures as c10::Error or std::runtime_error; plait's callers expect
// plait::Error with a category.
template <typename F>
auto guarded(const char* op, const std::string& keys, F&& f) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    std::string what = e.what();
    std::string msg = std::string("torch store ") + op + " of " + keys + " failed: " + what;
    if (what.find("imeout") != std::string::npos || what.find("imed out") != std::string::npos)
      throw timeout_error(std::move(msg), {.op = "store " + std::string(op)});
    throw remote_error(std::move(msg), {.op = "store " + std::string(op)});
  }
}

}  // namespace

void C10dStore::set(const std::string& key, const Bytes& value) {
  guarded("set", key, [&] {
    store_->set(key, value);
    return 0;
  });
}

Bytes C10dStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  return guarded("get", key, [&] { return store_->get(key); });
}

int64_t C10dStore::add(const std::string& key, int64_t delta) {
  return guarded("add", key, [&] { return store_->add(key, delta); });
}

void C10dStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  // Not torch's wait: one that times out leaves its WAIT registered at torch's TCPStore
  // server, and the server's answer, sent when the keys come, is then read by the next
  // request on the connection as its own. From there the connection is out of step: a wait
  // returns before its keys exist, a get of a key that is there times out ("Socket
  // Timeout"). plait waits in short slices on purpose (shm setup rescans every 20 ms), and
  // under load setups failed that way. CHECK leaves nothing behind at the server: ask with
  // it, every 0.2 ms at first, backing off to 5 ms.
  const std::string what = joined(keys);
  // Bounded so that a huge timeout cannot overflow the clock.
  const auto until = std::chrono::steady_clock::now() +
                     std::min<std::chrono::milliseconds>(timeout, std::chrono::hours(24 * 365));
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    if (guarded("wait", what, [&] { return store_->check(keys); })) return;
    const auto now = std::chrono::steady_clock::now();
    if (now >= until)
      throw timeout_error("torch store wait of " + what + " timed out after " +
                              std::to_string(timeout.count()) + " ms",
                          {.op = "store wait"});
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, until - now));
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(5));
  }
}

bool C10dStore::check(const std::string& key) {
  return guarded("check", key, [&] { return store_->check({key}); });
}

}  // namespace plait::torch_backend
