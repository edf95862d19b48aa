// Client of the embedded TCP store (wire format in store_protocol.h).
//
// One connection per client; a mutex serialises requests, so a thread blocked in get() holds
// the connection until its answer comes (give threads that must make progress independently
// their own client). The server does the waiting for get()/wait(); the client's own socket
// deadline (the request's timeout plus a margin) only guards against a server that died or
// hangs. After any transport failure the connection is out of step with the server, so the
// client refuses further requests instead of reading someone else's reply.
#include <algorithm>
#include <mutex>

#include "bootstrap/store_protocol.h"
#include "core/auth.h"
#include "core/clock.h"
#include "core/socket.h"
#include "plait/error.h"
#include "plait/store.h"

namespace plait {
namespace {

using namespace store_wire;
using std::chrono::milliseconds;

// How long past its own timeout a get/wait may take to be answered: covers the network and
// a busy server, while a dead one is still noticed.
constexpr milliseconds kReplyMargin{5000};
constexpr milliseconds kMaxWait = std::chrono::hours(24 * 365);

std::string endpoint(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

std::string quoted_keys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 5;
  std::string out;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) out += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > kShown) out += " and " + std::to_string(keys.size() - kShown) + " more";
  return out;
}

class TcpStoreClient : public Store {
 public:
  TcpStoreClient(const std::string& host, int port, const std::string& job_token,
                 milliseconds timeout)
      : address_(endpoint(host, port)), io_timeout_(bounded(timeout)) {
    Deadline deadline = Deadline::after(io_timeout_);
    try {
      fd_ = net::connect_tcp(host, port, deadline);
      auth::connect_handshake(fd_.get(), job_token, kAuthLabel, deadline);
    } catch (const Error& e) {
      std::string message = e.message();
      if (message.find(address_) == std::string::npos)
        message = "store at " + address_ + ": " + message;
      if (e.category() == ErrorCategory::kTimeout)
        message += " (gave up after " + std::to_string(timeout.count()) + " ms; is the store up?)";
      throw Error(e.category(), message, {.op = "store connect"});
    }
  }

  void set(const std::string& key, const Bytes& value) override {
    Writer w;
    w.u8(uint8_t(Op::kSet)).str(key).bytes(value);
    request(Op::kSet, std::move(w), io_timeout_, {key}, {});
  }

  Bytes get(const std::string& key, milliseconds timeout) override {
    timeout = bounded(timeout);
    Writer w;
    w.u8(uint8_t(Op::kGet)).u64(uint64_t(timeout.count())).str(key);
    return request(Op::kGet, std::move(w), timeout + kReplyMargin, {key}, timeout).value;
  }

  int64_t add(const std::string& key, int64_t delta) override {
    Writer w;
    w.u8(uint8_t(Op::kAdd)).str(key).i64(delta);
    return request(Op::kAdd, std::move(w), io_timeout_, {key}, {}).number;
  }

  void wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    timeout = bounded(timeout);
    Writer w;
    w.u8(uint8_t(Op::kWait)).u64(uint64_t(timeout.count()));
    write_strings(w, keys);
    request(Op::kWait, std::move(w), timeout + kReplyMargin, keys, timeout);
  }

  bool check(const std::string& key) override {
    Writer w;
    w.u8(uint8_t(Op::kCheck)).str(key);
    return request(Op::kCheck, std::move(w), io_timeout_, {key}, {}).exists;
  }

 private:
  // Non-negative and small enough that adding the margin cannot overflow.
  static milliseconds bounded(milliseconds timeout) {
    return std::clamp<milliseconds>(timeout, milliseconds(0), kMaxWait);
  }

  // Sends one request and returns its OK reply (store_wire::decode_reply). TIMEOUT and ERROR
  // replies and transport failures become plait::Error naming the keys and this store.
  Reply request(Op op, Writer&& w, milliseconds socket_timeout,
                const std::vector<std::string>& keys, milliseconds wait_timeout) {
    Bytes frame = w.finish();
    const ErrorContext ctx{.op = op_name(op)};
    std::lock_guard lock(mu_);
    if (!broken_.empty()) {
      throw remote_error(
          "store at " + address_ + " is unusable after an earlier failure (" + broken_ + ")", ctx);
    }
    Reply reply;
    try {
      Bytes body = exchange(frame, socket_timeout);
      reply = decode_reply(op, body.data(), body.size());
    } catch (const Error& e) {
      throw transport_failure(e, ctx, keys);
    }
    if (reply.status == Status::kOk) return reply;
    if (reply.status == Status::kTimeout) {
      const std::vector<std::string>& absent = reply.missing_keys;
      throw timeout_error("Timed out after " + std::to_string(wait_timeout.count()) +
                              " ms waiting for " + (absent.size() == 1 ? "key " : "keys ") +
                              quoted_keys(absent) + " in the store at " + address_,
                          ctx);
    }
    throw invalid_usage("store at " + address_ + " refused the request: " + reply.error, ctx);
  }

  // One frame out, one frame back; returns the reply's body.
  Bytes exchange(const Bytes& frame, milliseconds socket_timeout) {
    Deadline deadline = Deadline::after(socket_timeout);
    net::send_all(fd_.get(), frame.data(), frame.size(), deadline);
    uint8_t header[kFrameHeaderBytes];
    net::recv_all(fd_.get(), header, sizeof header, deadline);
    // Checked before anything is allocated for it: the length is the peer's word.
    uint32_t len = read_frame_length(header);
    if (len == 0) throw invalid_usage("malformed store message: an empty reply frame");
    if (len > kMaxFrameBytes)
      throw invalid_usage("malformed store message: a reply frame of " + std::to_string(len) +
                          " bytes is over the limit of " + std::to_string(kMaxFrameBytes) +
                          " bytes");
    Bytes body(len);
    net::recv_all(fd_.get(), body.data(), body.size(), deadline);
    return body;
  }

  // The connection can no longer be trusted: remember why, and say so in the caller's terms.
  Error transport_failure(const Error& e, const ErrorContext& ctx,
                          const std::vector<std::string>& keys) {
    broken_ = e.message();
    if (e.category() == ErrorCategory::kRemote && e.message() == "connection closed by peer")
      return remote_error("store at " + address_ + " closed the connection", ctx);
    if (e.category() == ErrorCategory::kTimeout) {
      return timeout_error("Timed out waiting for the store at " + address_ + " to answer about " +
                               quoted_keys(keys) + " (server hung or unreachable)",
                           ctx);
    }
    if (e.category() == ErrorCategory::kInvalidUsage)
      return remote_error("store at " + address_ + " sent a bad reply: " + e.message(), ctx);
    return Error(e.category(), "store at " + address_ + ": " + e.message(), ctx);
  }

  const std::string address_;
  const milliseconds io_timeout_;
  std::mutex mu_;
  net::Fd fd_;
  std::string broken_;  // why the connection is unusable; empty while it is fine
};

}  // namespace

std::shared_ptr<Store> connect_tcp_store(const std::string& host, int port,
                                         const std::string& job_token,
                                         std::chrono::milliseconds timeout) {
  if (port <= 0 || port > 65535)
    throw invalid_usage("store port " + std::to_string(port) + " is out of range",
                        {.op = "store connect"});
  return std::make_shared<TcpStoreClient>(host, port, job_token, timeout);
}

}  // namespace plait
