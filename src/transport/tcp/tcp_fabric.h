// The TCP provider's Fabric. Its implementation is split by responsibility:
//
//   tcp_fabric.cc   construction, cancel, frame submission, dispatch of incoming headers,
//                   the cost model (the op lifecycle itself is OpLifecycle's)
//   two_sided.cc    tagged send/recv: eager, rendezvous (RTS/CTS/striped data), matching
//   rma.cc          write / read / atomics, initiator and target sides
//   progress.cc     the progress thread (epoll), peer failure, orderly shutdown
//   inline_progress.cc  a waiting caller reads the sockets itself; the progress thread parks
//   keepalive.cc    keep-alives: a silent peer is failed even with nothing pending
//   connect.cc      connection setup; stream.cc the per-socket I/O; wire.h the format
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/clock.h"
#include "core/futex_mutex.h"
#include "core/socket.h"
#include "transport/completion_queue.h"
#include "transport/fabric.h"
#include "transport/memory_registry.h"
#include "transport/op_lifecycle.h"
#include "transport/tcp/connect.h"
#include "transport/tcp/matcher.h"
#include "transport/tcp/stream.h"

namespace plait::transport::tcp {

class TcpFabric final : public Fabric,
                        public InlineProgress,
                        private StreamHandler,
                        private OpLifecycle {
 public:
  TcpFabric(const FabricOptions& options, Mesh mesh);
  ~TcpFabric() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const Capabilities& capabilities() const override { return capabilities_; }
  const CostModel& cost_model() const override { return cost_model_; }

  std::unique_ptr<CompletionQueue> create_cq() override;
  std::unique_ptr<MemoryRegion> register_memory(void* addr, size_t length,
                                                uint32_t access) override;

  void send(int peer, const void* buf, size_t len, uint64_t tag, uint64_t header,
            CompletionQueue* cq, uint64_t context) override;
  void recv(int peer, void* buf, size_t capacity, uint64_t tag, CompletionQueue* cq,
            uint64_t context) override;

  void recv_any_sibling(void* buf, size_t capacity, uint64_t tag, CompletionQueue* cq,
                        uint64_t context, std::shared_ptr<std::atomic<bool>> sibling) override;

  void write(int peer, const void* local, size_t len, const RemoteKey& rk, uint64_t remote_offset,
             std::optional<uint32_t> imm, CompletionQueue* cq, uint64_t context) override;
  void read(int peer, void* local, size_t len, const RemoteKey& rk, uint64_t remote_offset,
            CompletionQueue* cq, uint64_t context) override;
  void fetch_add(int peer, uint64_t* result, const RemoteKey& rk, uint64_t remote_offset,
                 uint64_t add, CompletionQueue* cq, uint64_t context) override;
  void compare_swap(int peer, uint64_t* result, const RemoteKey& rk, uint64_t remote_offset,
                    uint64_t expected, uint64_t desired, CompletionQueue* cq,
                    uint64_t context) override;

  void set_imm_cq(CompletionQueue* cq) override;
  void cancel(CompletionQueue* cq) override;
  bool peer_failed(int peer) const override;
  std::string peer_failure(int peer) const override;

  // InlineProgress (inline_progress.cc): a thread spinning on one of our queues reads the
  // sockets itself, and meanwhile the progress thread parks off the sockets, so that a
  // message costs no thread wake-up on either side.
  void begin_polling() override;
  void end_polling() override;
  bool progress() override;
  void hand_off() override;

 private:
  struct Peer : PeerHealth {
    std::vector<std::unique_ptr<Stream>> streams;
    // Under rx_mu_ (whoever reads the sockets):
    int goodbyes = 0;
    std::string first_loss;  // what its goodbye carried (OpLifecycle::first_loss)
    struct ImmWrite {
      uint64_t remaining = 0;
      bool denied = false;
    };
    // Striped writes with an immediate, by initiator op id: the immediate is delivered once
    // every piece is in.
    std::unordered_map<uint64_t, ImmWrite> imm_writes;
    // Streams (bit i: stream i) that broke while stream 0 lived: neither side uses them.
    std::atomic<uint64_t> dead_streams{0};
    // The keep-alive check's view: bytes read from this peer so far, and when they last grew.
    uint64_t heard_bytes = 0;
    Clock::time_point heard_at = Clock::now();
  };

  // --- peers and frames (tcp_fabric.cc; the op lifecycle is OpLifecycle's) ---
  PeerHealth* health_of(int rank) const override;
  Stream& stream(int peer, int index) { return *peers_[peer]->streams[index]; }
  void submit(int peer, int index, Frame frame);
  void report_sent(const FinishedOps& finished);
  size_t pieces(size_t len) const { return len == 0 ? 1 : (len + stripe_bytes_ - 1) / stripe_bytes_; }
  [[noreturn]] void protocol_error(const Stream& s, const std::string& what) const;

  // --- StreamHandler: dispatch by message type (tcp_fabric.cc) ---
  Incoming on_header(Stream& s, const WireHeader& h) override;
  void on_payload(Stream& s, const WireHeader& h, Incoming& in) override;

  // The stream for the i-th piece of a striped transfer to `peer`: the live ones in turn.
  int live_stream(int peer, size_t i) const;

  // --- a broken stream among several (stream_loss.cc) ---
  // Stream s (not 0) broke while stream 0 lives: it is closed and dropped from the striping,
  // the peer is told, rendezvous sends to it send their stripes again over the others and
  // one-sided operations with it fail. false when the peer as a whole must fail instead.
  // With rx_mu_ held.
  bool lose_stream(Stream& s, const std::string& why);
  void send_stripes(const OpRef& send, int peer);
  void on_data_ack(Stream& s, const WireHeader& h);
  void on_stream_lost(Stream& s, const WireHeader& h);
  int live_stream_count(int peer) const;

 public:
  // Tests: shuts one socket down, as a network fault would break it.
  void break_stream_for_test(int peer, int index);

 private:
  // --- two-sided (two_sided.cc) ---
  // An eager send written (or copied) inside the call, completed without an op; false when
  // it must take the op path (frames queued ahead of it, stream closed, peer failed).
  bool send_eager_now(int peer, const void* buf, size_t len, uint64_t tag, uint64_t header,
                      PolicyCompletionQueue* q, uint64_t context);
  void post_recv(int peer, void* buf, size_t capacity, uint64_t tag, CompletionQueue* cq,
                 uint64_t context, std::shared_ptr<std::atomic<bool>> sibling);
  Incoming on_eager(Stream& s, const WireHeader& h);
  void on_eager_payload(Stream& s, const WireHeader& h, Incoming& in);
  void on_rts(Stream& s, const WireHeader& h);
  void on_cts(Stream& s, const WireHeader& h);
  Incoming on_data(Stream& s, const WireHeader& h);
  void on_data_payload(Incoming& in, const WireHeader& h);
  // A recv matched a rendezvous request: clear the sender to send, or decline.
  void accept_rendezvous(const OpRef& recv, int source, uint64_t sender_op);

  // --- one-sided (rma.cc) ---
  void start_atomic(int peer, uint64_t* result, const RemoteKey& rk, uint64_t offset,
                    bool compare_swap, uint64_t arg0, uint64_t arg1, CompletionQueue* cq,
                    uint64_t context);
  Incoming on_write(Stream& s, const WireHeader& h);
  void on_write_payload(Stream& s, const WireHeader& h, Incoming& in);
  void on_read_request(Stream& s, const WireHeader& h);
  void on_atomic(Stream& s, const WireHeader& h);
  Incoming on_reply(Stream& s, const WireHeader& h);
  void on_reply_payload(const WireHeader& h, Incoming& in);
  void reply(Stream& s, WireHeader h, const std::string& denial);

  // --- progress (progress.cc) ---
  void start_progress();
  void progress_loop();
  // With rx_mu_ held: handles what epoll reported, then reads the ready streams; true if
  // a stream still has data beyond its read budget.
  bool serve(const epoll_event* events, int n);
  void service_ready();
  void on_stream_closed(Stream& s, Stream::ReadResult result, int error);
  void close_stream(Stream& s);
  // Marks the peer failed (or gone after its goodbye) and fails everything pending with it.
  void fail_peer(int peer, const std::string& why, bool orderly);
  void wake_progress();
  void shutdown_streams();
  // --- keep-alives (keepalive.cc), progress thread only ---
  bool keepalive_on() const { return keepalive_.count() > 0; }
  void keepalive_tick(Clock::time_point now);
  // --- parking (inline_progress.cc) ---
  // Whether the progress thread parks while callers poll (not under the block policy: its
  // callers never poll, they sleep until the progress thread reports).
  bool may_park() const { return config_.wait_policy != WaitPolicy::kBlock; }
  // Sleeps off the sockets while callers poll them; returns on a hand-off or stop (kWoken),
  // when nobody polled for a whole check period (kIdle), or at `until` (kTimer).
  enum class ParkEnd { kWoken, kIdle, kTimer };
  ParkEnd park(Clock::time_point until);
  void unpark();  // wakes a parked progress thread (futex), if it is parked

  const Config config_;
  Capabilities capabilities_;
  CostModel cost_model_;
  size_t eager_threshold_;
  size_t stripe_bytes_;
  int streams_;
  const std::chrono::milliseconds keepalive_;     // 0: off
  const std::chrono::milliseconds peer_timeout_;  // effective_peer_timeout()
  Clock::time_point next_keepalive_ = Clock::time_point::max();  // progress thread
  Clock::time_point last_keepalive_ = Clock::now();

  std::shared_ptr<MemoryRegistry> registry_;
  Matcher matcher_;
  std::vector<std::unique_ptr<Peer>> peers_;  // peers_[rank_] is null

  net::Fd epoll_;
  net::Fd wake_fd_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> broken_stream_{false};  // a caller's write broke a stream
  // One reader of the sockets at a time: the progress thread, or a caller polling inline
  // (try-lock). Guards every stream's receiving side, ready_ and the Peer fields above.
  FutexMutex rx_mu_;
  std::vector<Stream*> ready_;  // streams with data left after their read budget; rx_mu_
  // !ready_.empty() as of the last serve(), readable without the lock: a poller that leaves
  // such streams behind wakes the progress thread (epoll will not report them again).
  std::atomic<bool> backlog_{false};
  // Inline polling: callers between begin_polling() and end_polling(), and their passes
  // (the parked progress thread tells a caller that still polls from one that went away).
  std::atomic<int> pollers_{0};
  std::atomic<uint64_t> poll_passes_{0};
  // The park: a futex word bumped to wake the parked thread, and whether it is parked.
  std::atomic<uint32_t> park_word_{0};
  std::atomic<bool> parked_{false};
  std::atomic<bool> handoff_{false};  // a poller went to sleep: serve the sockets now
  std::thread progress_;
};

// The provider's loopback cost model and the eager threshold derived from it.
CostModel tcp_cost_model(const Config& config);

}  // namespace plait::transport::tcp
