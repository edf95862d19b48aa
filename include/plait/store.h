// The rendezvous store: a tiny key-value service that ranks use to find each other before
// any connection exists (like gloo's rendezvous::Store and torch's c10d::Store).
//
// Thread safety: every method may be called concurrently from several threads.
// Blocking: get() and wait() block until the keys exist or the timeout passes, then throw
// plait::Error with category kTimeout naming the missing keys. Nothing waits forever.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace plait {

using Bytes = std::vector<uint8_t>;

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Blocks until `key` exists (or timeout), then returns its value.
  virtual Bytes get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds `delta` to the integer stored at `key` (0 if absent) and returns the
  // new value. Integers are stored as decimal text, so get() on them reads "42".
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Blocks until every key exists (or timeout).
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // True if the key exists now; never blocks.
  virtual bool check(const std::string& key) = 0;

  void set(const std::string& key, const std::string& value) {
    set(key, Bytes(value.begin(), value.end()));
  }
  std::string get_string(const std::string& key, std::chrono::milliseconds timeout) {
    Bytes b = get(key, timeout);
    return std::string(b.begin(), b.end());
  }
};

// A view of another store with every key prefixed by `prefix` + "/"; lets communicators and
// jobs share one store without their keys colliding.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::string& key) override;
  using Store::set;
  // The store this one prefixes (job-wide keys, such as `plait run`'s requests).
  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string k(const std::string& key) const { return prefix_ + "/" + key; }
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

// An in-process store (for ranks that are threads of one process, and for tests).
std::shared_ptr<Store> make_hash_store();

// A store in a directory shared by all ranks (local disk or NFS): one file per key, written
// atomically by rename. Suitable when no rank can host a TCP server.
std::shared_ptr<Store> make_file_store(const std::string& directory);

// Client of the embedded TCP store served by `plait run` or by rank 0. Every connection
// first proves it knows the job token; a wrong token is refused with a clear error.
// Connecting retries until `timeout` (the server may start after the client).
std::shared_ptr<Store> connect_tcp_store(const std::string& host, int port,
                                         const std::string& job_token,
                                         std::chrono::milliseconds timeout);

// The embedded TCP store server. Serves on a background thread until destroyed.
class TcpStoreServer {
 public:
  // port 0 picks a free port; `host` is the address to bind ("0.0.0.0", "127.0.0.1").
  // `max_handshakes`: connections authenticated at once, one thread each; later ones wait in
  // the listen queue. 0 reads PLAIT_STORE_MAX_HANDSHAKES (default 256). Throws
  // Error(kInvalidUsage) when that variable does not parse.
  TcpStoreServer(const std::string& host, int port, std::string job_token, int max_handshakes = 0);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace plait
