// The harness of the tcp_stream and tcp_streams targets: see tcp_harness.h.
#include "tcp_harness.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <thread>
#include <vector>

#include "fuzz_support.h"
#include "plait/error.h"
#include "transport/tcp/tcp_fabric.h"
#include "transport/tcp/tcp_settings.h"

namespace plait::fuzz {
namespace {

using namespace plait::transport;
using plait::transport::tcp::MessageType;
using plait::transport::tcp::WireHeader;

constexpr auto kHang = std::chrono::seconds(5);

plait::Config fuzz_config(int streams) {
  plait::Config c;
  c.get<TcpSettings>().streams = streams;
  c.eager_threshold = 1024;  // rendezvous from 1 KiB, so that a small send takes RTS/CTS
  c.get<TcpSettings>().stripe_bytes = 4096;
  // Small limits, so an input that gets past them shows, and none allocates much.
  c.max_unexpected_bytes = 1 << 20;
  c.max_unexpected_messages = 64;
  c.wait_policy = plait::WaitPolicy::kBlock;  // the progress thread alone reads the socket
  c.timeout = std::chrono::milliseconds(200);  // bounds the shutdown grace
  return c;
}

// Gives RMA requests whose tag is the placeholder the region's real key.
void fill_in_key(std::vector<uint8_t>& input, uint64_t key) {
  size_t off = 0;
  while (input.size() - off >= sizeof(WireHeader)) {
    WireHeader h;
    std::memcpy(&h, input.data() + off, sizeof h);
    const bool rma = h.type == MessageType::kWrite || h.type == MessageType::kReadReq ||
                     h.type == MessageType::kAtomic;
    if (rma && h.tag == kKeyPlaceholder) {
      h.tag = key;
      std::memcpy(input.data() + off, &h, sizeof h);
    }
    off += sizeof h;
    if (h.length > input.size() - off) break;
    off += h.length;
  }
}

// Rank 1's side: writes each stream's input, then EOF, while reading whatever rank 0 sends
// so that neither side can block the other.
void play_peer(const std::vector<net::Fd>& fds, const std::vector<std::vector<uint8_t>>& input) {
  const size_t n = fds.size();
  std::vector<size_t> sent(n, 0);
  std::vector<bool> closed(n, false);
  size_t open = n;
  char sink[65536];
  const auto deadline = plait::Deadline::after(kHang);
  while (open > 0) {
    std::vector<pollfd> polls(n);
    for (size_t s = 0; s < n; ++s) {
      if (!closed[s] && sent[s] == input[s].size()) {
        ::shutdown(fds[s].get(), SHUT_WR);
        closed[s] = true;
        --open;
      }
      polls[s] = {fds[s].get(), static_cast<short>(POLLIN | (closed[s] ? 0 : POLLOUT)), 0};
    }
    PLAIT_FUZZ_CHECK(!deadline.expired());
    if (open == 0 || ::poll(polls.data(), n, 100) <= 0) continue;
    for (size_t s = 0; s < n; ++s) {
      const int fd = fds[s].get();
      if (polls[s].revents & POLLIN) (void)::recv(fd, sink, sizeof sink, MSG_DONTWAIT);
      if (closed[s] || !(polls[s].revents & (POLLOUT | POLLERR | POLLHUP))) continue;
      const ssize_t w = ::send(fd, input[s].data() + sent[s], input[s].size() - sent[s],
                               MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w > 0) sent[s] += static_cast<size_t>(w);
      // The fabric closed its side (a protocol error, a lost stream): the rest is moot.
      if (w < 0 && (errno == EPIPE || errno == ECONNRESET)) sent[s] = input[s].size();
    }
  }
}

}  // namespace

void run_tcp_fabric(std::vector<std::vector<uint8_t>> per_stream) {
  static const bool quiet = (quiet_logs(), true);  // before the first fabric logs
  (void)quiet;
  // Declared before the fabric: ops point into them until it is gone.
  std::vector<char> recv_big(8192), recv_small(8), send_buf(8192, 's'), write_buf(256, 'w');
  std::vector<char> read_buf(256), late_a(64), late_b(4096), region_mem(4096);
  uint64_t fetched = 0, swapped = 0;

  const int streams = static_cast<int>(per_stream.size());
  tcp::Mesh mesh;
  mesh.sockets.resize(2);
  mesh.nonces.resize(2);
  mesh.nonces[1].resize(streams);  // PLAIT_TCP_INTEGRITY's keys derive from them; off here
  std::vector<net::Fd> peer_ends;
  for (int s = 0; s < streams; ++s) {
    auto pair = socket_pair();
    mesh.sockets[1].push_back(std::move(pair.ours));
    peer_ends.push_back(std::move(pair.theirs));
  }
  FabricOptions o;
  o.rank = 0;
  o.size = 2;
  o.name = "fuzz";
  o.job_token = "fuzz-job-token";
  o.config = fuzz_config(streams);
  auto fabric = std::make_unique<tcp::TcpFabric>(o, std::move(mesh));
  auto cq = fabric->create_cq();
  auto imm_cq = fabric->create_cq();
  fabric->set_imm_cq(imm_cq.get());
  auto region = fabric->register_memory(region_mem.data(), region_mem.size(), kAccessAll);

  const RemoteKey theirs{0x10000, 1 << 20, 0x5eed};  // rank 1's region
  int ops = 0;
  fabric->recv(1, recv_big.data(), recv_big.size(), 1, cq.get(), ++ops);
  fabric->recv(1, recv_small.data(), recv_small.size(), 2, cq.get(), ++ops);
  fabric->send(1, send_buf.data(), send_buf.size(), 3, 33, cq.get(), ++ops);
  fabric->write(1, write_buf.data(), write_buf.size(), theirs, 64, 7u, cq.get(), ++ops);
  fabric->read(1, read_buf.data(), read_buf.size(), theirs, 128, cq.get(), ++ops);
  fabric->fetch_add(1, &fetched, theirs, 8, 1, cq.get(), ++ops);
  fabric->compare_swap(1, &swapped, theirs, 16, 0, 1, cq.get(), ++ops);
  fabric->send(1, send_buf.data(), 100, 4, 44, cq.get(), ++ops);  // eager: done at once

  for (auto& input : per_stream) fill_in_key(input, region->remote_key().key);
  play_peer(peer_ends, per_stream);

  const auto deadline = plait::Deadline::after(kHang);
  while (!fabric->peer_failed(1)) {
    PLAIT_FUZZ_CHECK(!deadline.expired());
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  fabric->recv(1, late_a.data(), late_a.size(), 5, cq.get(), ++ops);
  fabric->recv(1, late_b.data(), late_b.size(), 6, cq.get(), ++ops);
  const size_t capacity[] = {0, recv_big.size(), recv_small.size(), 0, 0, 0, 0, 0, 0,
                             late_a.size(), late_b.size()};
  static_assert(std::size(capacity) == 11);
  static const bool trace = std::getenv("PLAIT_FUZZ_TRACE") != nullptr;
  std::vector<bool> seen(ops + 1, false);
  for (int i = 0; i < ops; ++i) {
    Completion c;
    const auto left = std::max(deadline.remaining(), std::chrono::nanoseconds(0));
    PLAIT_FUZZ_CHECK(cq->wait(&c, std::chrono::duration_cast<std::chrono::microseconds>(left)));
    PLAIT_FUZZ_CHECK(c.context >= 1 && c.context <= static_cast<uint64_t>(ops));
    PLAIT_FUZZ_CHECK(!seen[c.context]);
    seen[c.context] = true;
    if (trace) {
      std::fprintf(stderr, "op %llu: %s, %zu bytes\n", static_cast<unsigned long long>(c.context),
                   c.ok() ? "ok" : c.error->what(), c.bytes);
    }
    // A receive that succeeds never reports more than its buffer holds.
    if (c.ok() && c.op == OpType::kRecv) PLAIT_FUZZ_CHECK(c.bytes <= capacity[c.context]);
  }
  Completion extra;
  PLAIT_FUZZ_CHECK(!cq->poll(&extra));
  region.reset();
  fabric.reset();
}

}  // namespace plait::fuzz
