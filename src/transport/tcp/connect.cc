#include "transport/tcp/connect.h"

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <mutex>
#include <string>
#include <thread>

#include "core/auth.h"
#include "core/log.h"
#include "plait/error.h"
#include "transport/tcp/wire.h"

namespace plait::transport::tcp {
namespace {

// Part of the HMAC input on both sides; the fabric name is checked in the hello instead, so
// that a name mismatch is reported as such and not as a wrong token.
constexpr std::string_view kAuthLabel = "plait tcp fabric";
constexpr size_t kMaxNameBytes = 4096;
constexpr auto kHandshakeTime = std::chrono::seconds(10);

std::string address_key(const std::string& name, int rank) {
  return name + "/addr/" + std::to_string(rank);
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

void send_hello(int fd, const FabricOptions& o, int stream, const Deadline& deadline) {
  Hello h;
  h.stream = static_cast<uint16_t>(stream);
  h.rank = o.rank;
  h.size = o.size;
  h.streams = static_cast<uint32_t>(o.config.tcp_streams);
  h.name_length = static_cast<uint32_t>(o.name.size());
  std::string bytes(reinterpret_cast<const char*>(&h), sizeof h);
  bytes += o.name;
  net::send_all(fd, bytes.data(), bytes.size(), deadline);
}

// Reads the peer's hello and checks that it belongs to this fabric; returns its rank/stream.
Hello recv_hello(int fd, const FabricOptions& o, const Deadline& deadline) {
  Hello h;
  net::recv_all(fd, &h, sizeof h, deadline);
  if (h.magic != Hello::kHelloMagic || h.version != Hello::kWireVersion)
    throw invalid_usage("peer is not a plait tcp fabric of the same version (hello magic " +
                        std::to_string(h.magic) + ", version " + std::to_string(h.version) + ")");
  if (h.name_length > kMaxNameBytes) throw invalid_usage("peer sent an oversized fabric name");
  std::string name(h.name_length, '\0');
  net::recv_all(fd, name.data(), name.size(), deadline);
  if (name != o.name)
    throw invalid_usage("peer belongs to fabric '" + name + "', not '" + o.name + "'");
  if (h.size != o.size || h.streams != static_cast<uint32_t>(o.config.tcp_streams))
    throw invalid_usage("peer rank " + std::to_string(h.rank) + " has size " +
                        std::to_string(h.size) + " and " + std::to_string(h.streams) +
                        " streams, we have " + std::to_string(o.size) + " and " +
                        std::to_string(o.config.tcp_streams));
  if (h.rank < 0 || h.rank >= o.size || h.stream >= h.streams)
    throw invalid_usage("peer sent an invalid rank " + std::to_string(h.rank) + " / stream " +
                        std::to_string(h.stream));
  return h;
}

int lower_members(const Mesh& mesh, int rank) {
  int n = 0;
  for (int r = 0; r < rank; ++r) n += mesh.member(r) ? 1 : 0;
  return n;
}

// Accepts the lower ranks' sockets on its own thread while the setup thread connects to the
// higher ranks, so that no pair of ranks waits on each other.
class Acceptor {
 public:
  Acceptor(const FabricOptions& o, int listen_fd, Mesh* mesh, const Deadline& deadline)
      : o_(o), listen_fd_(listen_fd), mesh_(mesh), deadline_(deadline),
        expected_(lower_members(*mesh, o.rank) * o.config.tcp_streams) {
    thread_ = std::thread([this] { run(); });
  }
  // On an error path: stops accepting at once.
  ~Acceptor() {
    stop_ = true;
    finish();
  }

  // Waits until every expected socket is in or the deadline passed.
  void finish() {
    if (thread_.joinable()) thread_.join();
  }

  // Ranks below ours with a socket missing; call after finish().
  std::vector<int> missing() const {
    std::vector<int> ranks;
    for (int r = 0; r < o_.rank; ++r)
      if (mesh_->member(r) && std::any_of(mesh_->sockets[r].begin(), mesh_->sockets[r].end(),
                      [](const net::Fd& fd) { return !fd.valid(); }))
        ranks.push_back(r);
    return ranks;
  }
  const std::string& last_rejection() const { return last_rejection_; }

 private:
  void run() {
    int accepted = 0;
    while (accepted < expected_ && !stop_ && !deadline_.expired()) {
      // Short slices, so that the destructor's stop request is honoured promptly.
      auto slice = Deadline::after(std::min<std::chrono::nanoseconds>(
          std::chrono::milliseconds(50), deadline_.remaining()));
      try {
        net::Fd fd = net::accept_tcp(listen_fd_, slice);
        if (!fd.valid()) continue;
        net::set_nodelay(fd.get());
        // A connector that goes quiet must not hold up the ranks queued behind it.
        const Deadline handshake(std::min(deadline_.at(), Clock::now() + kHandshakeTime));
        auth::accept_handshake(fd.get(), o_.job_token, kAuthLabel, handshake);
        Hello h = recv_hello(fd.get(), o_, handshake);
        if (h.rank >= o_.rank || !mesh_->member(h.rank) ||
            mesh_->sockets[h.rank][h.stream].valid())
          throw invalid_usage("unexpected connection from rank " + std::to_string(h.rank) +
                              " stream " + std::to_string(h.stream));
        send_hello(fd.get(), o_, h.stream, handshake);
        mesh_->sockets[h.rank][h.stream] = std::move(fd);
        ++accepted;
      } catch (const Error& e) {
        // A stray or misconfigured connector must not stop the job's own ranks from joining.
        log(LogLevel::kWarn, "rank ", o_.rank, ": tcp fabric '", o_.name,
            "': rejected a connection: ", e.what());
        last_rejection_ = e.message();
      } catch (const std::exception& e) {  // never let an exception end the thread
        last_rejection_ = e.what();
      }
    }
  }

  const FabricOptions& o_;
  const int listen_fd_;
  Mesh* mesh_;
  const Deadline deadline_;
  const int expected_;
  std::atomic<bool> stop_{false};
  std::string last_rejection_;
  std::thread thread_;
};

struct HostPort {
  std::string host;
  int port = 0;
};

HostPort parse_address(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos) throw invalid_usage("malformed peer address '" + text + "'");
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  long port = std::strtol(text.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port <= 0 || port > 65535)
    throw invalid_usage("malformed peer address '" + text + "'");
  return {host, static_cast<int>(port)};
}

// Waits a little for `key` to appear (returns either way), so that the caller can rescan.
void wait_for_key(const FabricOptions& o, const std::string& key, const Deadline& deadline) {
  auto slice = std::min<std::chrono::nanoseconds>(std::chrono::milliseconds(100),
                                                   deadline.remaining());
  try {
    o.store->wait({key}, std::chrono::duration_cast<std::chrono::milliseconds>(slice));
  } catch (const Error& e) {
    if (e.category() != ErrorCategory::kTimeout) throw;
  }
}

void connect_peer(const FabricOptions& o, int peer, const std::string& address, Mesh* mesh,
                  const Deadline& deadline) {
  HostPort hp = parse_address(address);
  for (int s = 0; s < o.config.tcp_streams; ++s) {
    net::Fd fd = net::connect_tcp(hp.host, hp.port, deadline);
    auth::connect_handshake(fd.get(), o.job_token, kAuthLabel, deadline);
    send_hello(fd.get(), o, s, deadline);
    Hello h = recv_hello(fd.get(), o, deadline);
    if (h.rank != peer || h.stream != s)
      throw invalid_usage("address " + address + " answered as rank " + std::to_string(h.rank) +
                          " stream " + std::to_string(h.stream) + ", expected rank " +
                          std::to_string(peer) + " stream " + std::to_string(s));
    mesh->sockets[peer][s] = std::move(fd);
  }
}

}  // namespace

Mesh connect_mesh(const FabricOptions& o) {
  const ErrorContext ctx{.rank = o.rank, .op = "tcp fabric '" + o.name + "' setup"};
  if (!o.store) throw invalid_usage("tcp fabric needs a store", ctx);
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size)
    throw invalid_usage("invalid rank " + std::to_string(o.rank) + " of size " +
                        std::to_string(o.size), ctx);
  if (o.config.tcp_streams < 1 || o.config.tcp_streams > 64)
    throw invalid_usage("tcp_streams must be in 1..64, got " +
                        std::to_string(o.config.tcp_streams), ctx);

  const Deadline deadline = Deadline::after(o.config.connect_timeout);
  Mesh mesh;
  mesh.sockets.resize(o.size);
  std::vector<bool> member(o.size, o.peers.empty());
  for (int p : o.peers) {
    if (p < 0 || p >= o.size)
      throw invalid_usage("peer " + std::to_string(p) + " is not a rank of " +
                          std::to_string(o.size), ctx);
    member[p] = true;
  }
  for (int r = 0; r < o.size; ++r)
    if (r != o.rank && member[r]) mesh.sockets[r].resize(o.config.tcp_streams);

  try {
    const std::string host = net::local_address(o.config.tcp_interface, o.route_hint);
    net::Fd listener = net::listen_tcp(host, 0);
    const int port = net::local_port(listener.get());
    const std::string shown = host.find(':') != std::string::npos ? "[" + host + "]" : host;
    o.store->set(address_key(o.name, o.rank), shown + ":" + std::to_string(port));

    Acceptor acceptor(o, listener.get(), &mesh, deadline);
    // Connect to each higher rank as soon as its address appears, so that one missing rank
    // does not keep the others from meeting (and the error names only the missing one).
    std::vector<int> unpublished;
    for (int peer = o.rank + 1; peer < o.size; ++peer)
      if (member[peer]) unpublished.push_back(peer);
    while (!unpublished.empty()) {
      bool connected_any = false;
      for (auto it = unpublished.begin(); it != unpublished.end();) {
        const std::string key = address_key(o.name, *it);
        if (!o.store->check(key)) {
          ++it;
          continue;
        }
        try {
          connect_peer(o, *it, o.store->get_string(key, std::chrono::milliseconds(0)), &mesh,
                       deadline);
        } catch (const Error& e) {
          throw e.with_context({.peer = *it});
        }
        it = unpublished.erase(it);
        connected_any = true;
      }
      if (unpublished.empty() || deadline.expired()) break;
      if (!connected_any) wait_for_key(o, address_key(o.name, unpublished.front()), deadline);
    }
    acceptor.finish();

    std::vector<int> unconnected = acceptor.missing();
    if (!unpublished.empty() || !unconnected.empty()) {
      std::string what = "timed out after " + std::to_string(o.config.connect_timeout.count()) +
                         " ms:";
      if (!unpublished.empty())
        what += " rank(s) " + rank_list(unpublished) + " never published an address;";
      if (!unconnected.empty())
        what += " rank(s) " + rank_list(unconnected) + " never connected;";
      what.pop_back();
      if (!acceptor.last_rejection().empty())
        what += " (a connection was rejected: " + acceptor.last_rejection() + ")";
      throw timeout_error(what);
    }
  } catch (const Error& e) {
    throw e.with_context(ctx);
  }
  return mesh;
}

}  // namespace plait::transport::tcp
