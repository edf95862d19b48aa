#include "transport/tcp/connect.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <list>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "core/auth.h"
#include "core/log.h"
#include "plait/error.h"
#include "transport/tcp/hello.h"
#include "transport/tcp/tcp_settings.h"
#include "transport/tcp/wire.h"

namespace plait::transport::tcp {
namespace {

// Part of the HMAC input on both sides; the fabric name is checked in the hello instead, so
// that a name mismatch is reported as such and not as a wrong token.
constexpr std::string_view kAuthLabel = "plait tcp fabric";
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
  h.streams = static_cast<uint16_t>(o.config.get<TcpSettings>().streams);
  h.flags = o.config.get<TcpSettings>().integrity ? Hello::kHelloIntegrity : 0;
  h.name_length = static_cast<uint32_t>(o.name.size());
  std::string bytes(reinterpret_cast<const char*>(&h), sizeof h);
  bytes += o.name;
  net::send_all(fd, bytes.data(), bytes.size(), deadline);
}

// Reads the peer's hello and checks that it belongs to this fabric; returns its rank/stream.
Hello recv_hello(int fd, const FabricOptions& o, const Deadline& deadline) {
  Hello h;
  net::recv_all(fd, &h, sizeof h, deadline);
  std::string name(hello_name_length(h), '\0');
  net::recv_all(fd, name.data(), name.size(), deadline);
  check_hello(h, name, o);
  return h;
}

int lower_members(const Mesh& mesh, int rank) {
  int n = 0;
  for (int r = 0; r < rank; ++r) n += mesh.member(r) ? 1 : 0;
  return n;
}

// Accepts the lower ranks' sockets on its own thread while the setup thread connects to the
// higher ranks, so that no pair of ranks waits on each other. Each accepted connection is
// authenticated on a thread of its own: a stranger that connects and says nothing holds up
// its own handshake only, not the ranks queued behind it.
class Acceptor {
 public:
  Acceptor(const FabricOptions& o, int listen_fd, Mesh* mesh, const Deadline& deadline)
      : o_(o), listen_fd_(listen_fd), mesh_(mesh), deadline_(deadline),
        expected_(lower_members(*mesh, o.rank) * o.config.get<TcpSettings>().streams) {
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
  // Connections being authenticated at once; past this, the oldest is cut off (a flood).
  static constexpr size_t kMaxHandshakes = 64;
  struct Handshake {
    int fd = -1;
    bool done = false;  // under mu_: the socket is in the mesh or closed
    bool cut = false;   // under mu_: shut down by us; it must not enter the mesh
    std::thread thread;
  };

  void run() {
    while (accepted_.load() < expected_ && !stop_ && !deadline_.expired()) {
      // Short slices, so that the destructor's stop request is honoured promptly.
      auto slice = Deadline::after(std::min<std::chrono::nanoseconds>(
          std::chrono::milliseconds(50), deadline_.remaining()));
      net::Fd fd;
      try {
        fd = net::accept_tcp(listen_fd_, slice);
      } catch (const std::exception& e) {
        reject(e.what());
      }
      reap(false);
      if (!fd.valid()) continue;
      std::lock_guard lock(mu_);
      if (handshakes_.size() >= kMaxHandshakes) {
        // A flood: the oldest handshake gives way. A rank's takes milliseconds, so the
        // oldest is a connector that stays silent, not a rank.
        for (Handshake& old : handshakes_)
          if (!old.done && !old.cut) {
            cut_locked(old);
            break;
          }
      }
      Handshake& h = handshakes_.emplace_back();
      h.fd = fd.release();
      h.thread = std::thread([this, &h] { authenticate(h); });
    }
    // The ranks are in (or the setup gave up): whoever is still in a handshake is a stranger,
    // or too late; its socket is shut so that its thread returns now.
    reap(true);
  }

  void authenticate(Handshake& h) {
    net::Fd fd;
    {
      std::lock_guard lock(mu_);  // h.fd is ours once run() let go of the lock
      fd = net::Fd(h.fd);
    }
    try {
      net::set_nodelay(fd.get());
      // A connector that goes quiet is cut off after this.
      const Deadline handshake(std::min(deadline_.at(), Clock::now() + kHandshakeTime));
      const auth::Nonce nonce = auth::accept_handshake(fd.get(), o_.job_token, kAuthLabel, handshake);
      Hello hello = recv_hello(fd.get(), o_, handshake);
      {
        std::lock_guard lock(mu_);
        if (h.cut || hello.rank >= o_.rank || !mesh_->member(hello.rank) ||
            mesh_->sockets[hello.rank][hello.stream].valid() ||
            claimed_.count({hello.rank, hello.stream}))
          throw invalid_usage("unexpected connection from rank " + std::to_string(hello.rank) +
                              " stream " + std::to_string(hello.stream));
        claimed_.insert({hello.rank, hello.stream});
      }
      send_hello(fd.get(), o_, hello.stream, handshake);
      std::lock_guard lock(mu_);
      if (h.cut) throw invalid_usage("cut off: the setup ended, or a flood of connections");
      mesh_->sockets[hello.rank][hello.stream] = std::move(fd);
      mesh_->nonces[hello.rank][hello.stream] = nonce;
      h.done = true;
      ++accepted_;
    } catch (const Error& e) {
      // A stray or misconfigured connector must not stop the job's own ranks from joining.
      std::lock_guard lock(mu_);
      if (h.cut) {
        // Its error is our own shutdown: say what happened, once per flood is plenty.
        if (!flood_logged_)
          log(LogLevel::kWarn, "rank ", o_.rank, ": tcp fabric '", o_.name,
              "': cut off connections still in their handshake (a flood of connections, or "
              "the setup ended): the first from ", net::peer_address(fd.get()));
        flood_logged_ = true;
      } else {
        log(LogLevel::kWarn, "rank ", o_.rank, ": tcp fabric '", o_.name,
            "': rejected a connection: ", e.what());
        last_rejection_ = e.message();
      }
      h.done = true;
    } catch (const std::exception& e) {  // never let an exception end the thread
      std::lock_guard lock(mu_);
      last_rejection_ = e.what();
      h.done = true;
    }
  }

  // Joins the finished handshakes; with `all`, first cuts off the unfinished ones.
  void reap(bool all) {
    std::list<Handshake> finished;
    {
      std::lock_guard lock(mu_);
      for (auto it = handshakes_.begin(); it != handshakes_.end();) {
        if (all && !it->done) cut_locked(*it);
        if (all || it->done) {
          auto next = std::next(it);
          finished.splice(finished.end(), handshakes_, it);
          it = next;
        } else {
          ++it;
        }
      }
    }
    for (Handshake& h : finished) h.thread.join();
  }

  void cut_locked(Handshake& h) {
    if (!h.cut) ::shutdown(h.fd, SHUT_RDWR);
    h.cut = true;
  }

  void reject(const std::string& why) {
    log(LogLevel::kWarn, "rank ", o_.rank, ": tcp fabric '", o_.name,
        "': rejected a connection: ", why);
    std::lock_guard lock(mu_);
    last_rejection_ = why;
  }

  const FabricOptions& o_;
  const int listen_fd_;
  Mesh* mesh_;
  const Deadline deadline_;
  const int expected_;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::mutex mu_;
  std::list<Handshake> handshakes_;          // mu_
  std::set<std::pair<int, int>> claimed_;    // mu_: (rank, stream) in a handshake's reply
  std::string last_rejection_;               // mu_, or after finish()
  bool flood_logged_ = false;                // mu_
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
  for (int s = 0; s < o.config.get<TcpSettings>().streams; ++s) {
    net::Fd fd = net::connect_tcp(hp.host, hp.port, deadline);
    const auth::Nonce nonce = auth::connect_handshake(fd.get(), o.job_token, kAuthLabel, deadline);
    send_hello(fd.get(), o, s, deadline);
    Hello h = recv_hello(fd.get(), o, deadline);
    if (h.rank != peer || h.stream != s)
      throw invalid_usage("address " + address + " answered as rank " + std::to_string(h.rank) +
                          " stream " + std::to_string(h.stream) + ", expected rank " +
                          std::to_string(peer) + " stream " + std::to_string(s));
    mesh->sockets[peer][s] = std::move(fd);
    mesh->nonces[peer][s] = nonce;
  }
}

}  // namespace

Mesh connect_mesh(const FabricOptions& o) {
  const ErrorContext ctx{.rank = o.rank, .op = "tcp fabric '" + o.name + "' setup"};
  if (!o.store) throw invalid_usage("tcp fabric needs a store", ctx);
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size)
    throw invalid_usage("invalid rank " + std::to_string(o.rank) + " of size " +
                        std::to_string(o.size), ctx);
  if (o.config.get<TcpSettings>().streams < 1 || o.config.get<TcpSettings>().streams > 64)
    throw invalid_usage("tcp_streams must be in 1..64, got " +
                        std::to_string(o.config.get<TcpSettings>().streams), ctx);

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
  mesh.nonces.resize(o.size);
  for (int r = 0; r < o.size; ++r)
    if (r != o.rank && member[r]) {
      mesh.sockets[r].resize(o.config.get<TcpSettings>().streams);
      mesh.nonces[r].resize(o.config.get<TcpSettings>().streams);
    }

  try {
    const std::string host = net::local_address(o.config.get<TcpSettings>().interface, o.route_hint);
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
