// What the embedded TCP store server's requests do to its data, and the GET/WAIT requests
// parked until a SET or ADD answers them or their deadline passes. All on the loop thread;
// the design is at the top of tcp_store_server_impl.h.
#include <algorithm>

#include "bootstrap/tcp_store_server_impl.h"
#include "plait/error.h"

namespace plait {
namespace {

using namespace store_wire;
using store_server::Parked;

// Caps a client's timeout so deadline arithmetic cannot overflow.
constexpr auto kMaxRequestWait = std::chrono::hours(24 * 365);

}  // namespace

void TcpStoreServer::Impl::execute(Conn& c, Request q) {
  switch (q.op) {
    case Op::kSet: {
      data[q.key] = std::move(q.value);
      reply_status(c, Status::kOk);
      key_changed(q.key);
      return;
    }
    case Op::kGet:
      answer_or_park(c, q.op, {std::move(q.key)}, q.timeout_ms);
      return;
    case Op::kAdd: {
      const std::string& key = q.key;
      int64_t value = 0;
      if (auto it = data.find(key); it != data.end()) {
        std::optional<int64_t> old = parse_decimal(it->second);
        if (!old) {
          return reply_status(c, Status::kError, {},
                              "the value of key '" + key + "' is not a decimal integer");
        }
        value = *old;
      }
      if (__builtin_add_overflow(value, q.delta, &value)) {
        return reply_status(c, Status::kError, {},
                            "adding " + std::to_string(q.delta) + " to key '" + key +
                                "' overflows");
      }
      std::string text = std::to_string(value);
      data[key] = Bytes(text.begin(), text.end());
      reply(c, Writer().u8(uint8_t(Status::kOk)).i64(value).finish());
      key_changed(key);
      return;
    }
    case Op::kWait:
      answer_or_park(c, q.op, std::move(q.keys), q.timeout_ms);
      return;
    case Op::kCheck:
      reply(c, Writer().u8(uint8_t(Status::kOk)).u8(data.count(q.key) ? 1 : 0).finish());
      return;
  }
}

// OK without a payload, TIMEOUT with the missing keys, or ERROR with a message.
void TcpStoreServer::Impl::reply_status(Conn& c, Status status,
                                        const std::vector<std::string>& missing_keys,
                                        const std::string& error) {
  Writer w;
  w.u8(uint8_t(status));
  if (status == Status::kTimeout) write_strings(w, missing_keys);
  if (status == Status::kError) w.str(error);
  reply(c, w.finish());
}

std::vector<std::string> TcpStoreServer::Impl::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys)
    if (!data.count(k)) out.push_back(k);
  return out;
}

void TcpStoreServer::Impl::answer_ready(Conn& c, Op op, const std::vector<std::string>& keys) {
  Writer w;
  w.u8(uint8_t(Status::kOk));
  if (op == Op::kGet) w.bytes(data.at(keys.front()));
  reply(c, w.finish());
}

void TcpStoreServer::Impl::answer_or_park(Conn& c, Op op, std::vector<std::string> keys,
                                          uint64_t timeout_ms) {
  std::vector<std::string> absent = missing(keys);
  if (absent.empty()) return answer_ready(c, op, keys);
  if (timeout_ms == 0) return reply_status(c, Status::kTimeout, absent);
  auto wait =
      std::min<std::chrono::milliseconds>(std::chrono::milliseconds(timeout_ms), kMaxRequestWait);
  int fd = c.fd.get();
  c.parked = Parked{op, std::move(keys), Clock::now() + wait};
  for (const auto& k : absent) waiting_on[k].insert(fd);
  deadlines.emplace(c.parked->deadline, fd);
}

void TcpStoreServer::Impl::unpark(int fd, Conn& c) {
  if (!c.parked) return;
  for (const auto& k : c.parked->keys) {
    auto it = waiting_on.find(k);
    if (it == waiting_on.end()) continue;
    it->second.erase(fd);
    if (it->second.empty()) waiting_on.erase(it);
  }
  deadlines.erase({c.parked->deadline, fd});
  c.parked.reset();
}

void TcpStoreServer::Impl::key_changed(const std::string& key) {
  auto it = waiting_on.find(key);
  if (it == waiting_on.end()) return;
  std::vector<int> fds(it->second.begin(), it->second.end());
  for (int fd : fds) {
    Conn& w = conns.at(fd);
    if (!w.parked || !missing(w.parked->keys).empty()) continue;
    Parked p = *w.parked;
    unpark(fd, w);
    unparked.push_back(fd);
    answer_ready(w, p.op, p.keys);
  }
}

void TcpStoreServer::Impl::expire_parked() {
  auto now = Clock::now();
  while (!deadlines.empty() && deadlines.begin()->first <= now) {
    int fd = deadlines.begin()->second;
    Conn& c = conns.at(fd);
    std::vector<std::string> absent = missing(c.parked->keys);
    unpark(fd, c);
    unparked.push_back(fd);
    reply_status(c, Status::kTimeout, absent);
  }
}

void TcpStoreServer::Impl::run_unparked() {
  while (!unparked.empty()) {
    std::vector<int> batch;
    batch.swap(unparked);
    for (int fd : batch) {
      auto it = conns.find(fd);
      if (it != conns.end()) serve(it->second);
    }
  }
}

}  // namespace plait
