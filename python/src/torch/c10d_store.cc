#include "c10d_store.h"

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
  guarded("wait", joined(keys), [&] {
    store_->wait(keys, timeout);
    return 0;
  });
}

bool C10dStore::check(const std::string& key) {
  return guarded("check", key, [&] { return store_->check({key}); });
}

}  // namespace plait::torch_backend
