// Wire format of the embedded TCP store, shared by its client and server.
//
// A connection starts with the job-token handshake (core/auth.h, label kAuthLabel). Then the
// client sends requests and the server answers each one, in order, one at a time. Every
// message is a frame: u32 body length, then the body. Integers are big-endian; a "string" is
// u32 length + bytes (keys and values are binary-safe).
//
//   request  = op u8, then by op:
//     SET    key, value
//     GET    timeout_ms u64, key            answered once the key exists, or at the timeout
//     ADD    key, delta i64                 value is decimal text; absent counts as 0
//     WAIT   timeout_ms u64, n u32, n keys  answered once all keys exist, or at the timeout
//     CHECK  key
//   reply    = status u8, then by status:
//     OK       SET/WAIT: nothing; GET: value; ADD: new value i64; CHECK: exists u8
//     TIMEOUT  n u32, n missing keys
//     ERROR    message (the request was refused, e.g. ADD on a non-integer value)
//
// The server waits for GET/WAIT itself, so clients never poll; it closes a connection that
// sends a malformed frame.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plait/error.h"
#include "plait/store.h"

namespace plait::store_wire {

inline constexpr std::string_view kAuthLabel = "store";
// Rendezvous data is small; this bound stops a corrupt length from allocating gigabytes.
inline constexpr uint32_t kMaxFrameBytes = 256u << 20;
inline constexpr size_t kFrameHeaderBytes = 4;
// Keys in one WAIT (or in one TIMEOUT's list). Each costs the reader a std::string (32 bytes
// here) for 4 bytes of frame, so without it a frame near kMaxFrameBytes would make the server
// allocate 2 GiB; with it, 32 MiB at most. A job waits on a key per rank at most.
inline constexpr uint32_t kMaxKeys = 1u << 20;

enum class Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kWait = 4, kCheck = 5 };
enum class Status : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

inline const char* op_name(Op op) {
  switch (op) {
    case Op::kSet:
      return "store set";
    case Op::kGet:
      return "store get";
    case Op::kAdd:
      return "store add";
    case Op::kWait:
      return "store wait";
    case Op::kCheck:
      return "store check";
  }
  return "store request";
}

// Builds one frame; the length prefix is filled in by finish().
class Writer {
 public:
  Writer() : buf_(kFrameHeaderBytes, 0) {}

  Writer& u8(uint8_t v) {
    buf_.push_back(v);
    return *this;
  }
  Writer& u32(uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) buf_.push_back(static_cast<uint8_t>(v >> shift));
    return *this;
  }
  Writer& u64(uint64_t v) {
    for (int shift = 56; shift >= 0; shift -= 8) buf_.push_back(static_cast<uint8_t>(v >> shift));
    return *this;
  }
  Writer& i64(int64_t v) { return u64(static_cast<uint64_t>(v)); }
  Writer& bytes(const void* data, size_t len) {
    u32(static_cast<uint32_t>(len));
    auto* p = static_cast<const uint8_t*>(data);
    buf_.insert(buf_.end(), p, p + len);
    return *this;
  }
  Writer& str(std::string_view s) { return bytes(s.data(), s.size()); }
  Writer& bytes(const Bytes& b) { return bytes(b.data(), b.size()); }

  // The whole frame, length prefix included; the writer is spent afterwards. Throws if the
  // body is over kMaxFrameBytes.
  Bytes finish() {
    size_t body = buf_.size() - kFrameHeaderBytes;
    if (body > kMaxFrameBytes) {
      throw invalid_usage("store message of " + std::to_string(body) +
                          " bytes is over the limit of " + std::to_string(kMaxFrameBytes));
    }
    for (int i = 0; i < 4; ++i) buf_[i] = static_cast<uint8_t>(body >> (24 - 8 * i));
    return std::move(buf_);
  }

 private:
  Bytes buf_;
};

inline uint32_t read_frame_length(const uint8_t* header) {
  return uint32_t(header[0]) << 24 | uint32_t(header[1]) << 16 | uint32_t(header[2]) << 8 |
         uint32_t(header[3]);
}

// Parses one frame body. Every read checks bounds; a short or overlong body throws
// kInvalidUsage "malformed store message", which the receiver turns into its own error.
class Reader {
 public:
  Reader(const uint8_t* data, size_t len) : p_(data), end_(data + len) {}

  uint8_t u8() {
    need(1);
    return *p_++;
  }
  uint32_t u32() {
    need(4);
    uint32_t v = read_frame_length(p_);
    p_ += 4;
    return v;
  }
  uint64_t u64() {
    uint64_t hi = u32();
    return hi << 32 | u32();
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  Bytes bytes() {
    uint32_t len = u32();
    need(len);
    Bytes out(p_, p_ + len);
    p_ += len;
    return out;
  }
  std::string str() {
    uint32_t len = u32();
    need(len);
    std::string out(reinterpret_cast<const char*>(p_), len);
    p_ += len;
    return out;
  }
  std::vector<std::string> strings() {
    uint32_t n = u32();
    if (n > kMaxKeys) {
      throw invalid_usage("malformed store message: " + std::to_string(n) +
                          " keys, over the limit of " + std::to_string(kMaxKeys));
    }
    // Each string takes at least its 4-byte length, so n is bounded by what is left.
    need(size_t(n) * 4);
    std::vector<std::string> out;
    out.reserve(n);
    for (uint32_t i = 0; i < n; ++i) out.push_back(str());
    return out;
  }
  void expect_end() const {
    if (p_ != end_) throw invalid_usage("malformed store message: trailing bytes");
  }

 private:
  void need(size_t n) const {
    if (static_cast<size_t>(end_ - p_) < n)
      throw invalid_usage("malformed store message: truncated");
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

// ADD's values are decimal text (so get() reads "42"); anything else is not an integer.
inline std::optional<int64_t> parse_decimal(const Bytes& value) {
  auto* begin = reinterpret_cast<const char*>(value.data());
  auto* end = begin + value.size();
  int64_t out = 0;
  auto [ptr, ec] = std::from_chars(begin, end, out);
  if (value.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return out;
}

inline Writer& write_strings(Writer& w, const std::vector<std::string>& items) {
  if (items.size() > kMaxKeys) {
    throw invalid_usage("store wait on " + std::to_string(items.size()) +
                        " keys is over the limit of " + std::to_string(kMaxKeys));
  }
  w.u32(static_cast<uint32_t>(items.size()));
  for (const auto& s : items) w.str(s);
  return w;
}

// A request as the server reads it; each op fills the fields of its row in the table above.
struct Request {
  Op op = Op::kSet;
  std::string key;                // SET, GET, ADD, CHECK
  Bytes value;                    // SET
  uint64_t timeout_ms = 0;        // GET, WAIT
  int64_t delta = 0;              // ADD
  std::vector<std::string> keys;  // WAIT
};

// Decodes one request frame's body. Pure (no I/O), so the server and the fuzz target
// (fuzz/store_request_fuzz.cc) run the same code on a peer's bytes; throws kInvalidUsage
// "malformed store message: ..." for anything that is not exactly one request.
inline Request decode_request(const uint8_t* data, size_t len) {
  Reader r(data, len);
  Request q;
  q.op = static_cast<Op>(r.u8());
  switch (q.op) {
    case Op::kSet:
      q.key = r.str();
      q.value = r.bytes();
      break;
    case Op::kGet:
      q.timeout_ms = r.u64();
      q.key = r.str();
      break;
    case Op::kAdd:
      q.key = r.str();
      q.delta = r.i64();
      break;
    case Op::kWait:
      q.timeout_ms = r.u64();
      q.keys = r.strings();
      break;
    case Op::kCheck:
      q.key = r.str();
      break;
    default:
      throw invalid_usage("malformed store message: unknown op " + std::to_string(int(q.op)));
  }
  r.expect_end();
  return q;
}

// A reply as the client reads it, for the request op it answers.
struct Reply {
  Status status = Status::kOk;
  Bytes value;                            // OK to GET
  int64_t number = 0;                     // OK to ADD: the new value
  bool exists = false;                    // OK to CHECK
  std::vector<std::string> missing_keys;  // TIMEOUT
  std::string error;                      // ERROR: why the server refused
};

// Decodes the body of the reply to a request of `op`; pure, like decode_request(). Throws
// kInvalidUsage "malformed store message: ..." for a body that is no such reply.
inline Reply decode_reply(Op op, const uint8_t* data, size_t len) {
  Reader r(data, len);
  Reply a;
  a.status = static_cast<Status>(r.u8());
  switch (a.status) {
    case Status::kOk:
      if (op == Op::kGet) a.value = r.bytes();
      if (op == Op::kAdd) a.number = r.i64();
      if (op == Op::kCheck) a.exists = r.u8() != 0;
      r.expect_end();
      return a;
    case Status::kTimeout:
      a.missing_keys = r.strings();
      return a;
    case Status::kError:
      a.error = r.str();
      return a;
  }
  throw invalid_usage("malformed store message: status " + std::to_string(int(a.status)));
}

}  // namespace plait::store_wire
