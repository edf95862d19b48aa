// The in-process store: ranks that are threads of one process (tests, one-rank jobs).
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>

#include "core/clock.h"
#include "plait/error.h"
#include "plait/store.h"

namespace plait {
namespace {

class HashStore : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override {
    {
      std::lock_guard lock(mu_);
      data_[key] = value;
    }
    cv_.notify_all();
  }

  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    wait({key}, timeout);
    std::lock_guard lock(mu_);
    return data_.at(key);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    int64_t value;
    {
      std::lock_guard lock(mu_);
      auto it = data_.find(key);
      int64_t old = 0;
      if (it != data_.end()) {
        std::string text(it->second.begin(), it->second.end());
        char* end = nullptr;
        errno = 0;
        long long v = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || errno != 0 || *end != '\0')
          throw invalid_usage("store add: value of key '" + key + "' is not an integer",
                              {.op = "store add"});
        old = v;
      }
      value = old + delta;
      std::string text = std::to_string(value);
      data_[key] = Bytes(text.begin(), text.end());
    }
    cv_.notify_all();
    return value;
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mu_);
    auto missing = [&] {
      for (const auto& k : keys)
        if (!data_.count(k)) return k;
      return std::string();
    };
    bool ok = cv_.wait_for(lock, timeout, [&] { return missing().empty(); });
    if (!ok) {
      throw timeout_error("store key '" + missing() + "' did not appear within " +
                              std::to_string(timeout.count()) + " ms",
                          {.op = "store wait"});
    }
  }

  bool check(const std::string& key) override {
    std::lock_guard lock(mu_);
    return data_.count(key) != 0;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> data_;
};

}  // namespace

std::shared_ptr<Store> make_hash_store() { return std::make_shared<HashStore>(); }

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {}

void PrefixStore::set(const std::string& key, const Bytes& value) { base_->set(k(key), value); }

Bytes PrefixStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return base_->get(k(key), timeout);
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) { return base_->add(k(key), delta); }

void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& key : keys) full.push_back(k(key));
  base_->wait(full, timeout);
}

bool PrefixStore::check(const std::string& key) { return base_->check(k(key)); }

}  // namespace plait
