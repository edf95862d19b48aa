// The shm provider's Fabric: ranks on one host, through shared memory. Its implementation is
// split by responsibility:
//
//   shm_fabric.cc   construction and shutdown, cancel, the cost model, inline progress (the
//                   InlineProgress hooks); the op lifecycle itself is OpLifecycle's
//   two_sided.cc    tagged send/recv: eager through the ring; rendezvous pulled by the
//                   receiver with process_vm_readv, or pushed through the ring in pieces
//   rma.cc          write / read by cross-memory attach into a pinned peer region; the ring
//                   fallback executed by the target; atomics executed by the target
//   gathered_write.cc  write_gathered: many local pieces into one remote range, one copy
//   progress.cc     draining the rings, the progress thread and its doorbell, transfers in
//                   chunks, peer death and shutdown
//   setup.cc        segments and the store handshake; segment.cc, ring.h, outbox.cc,
//                   region_table.cc, cma.cc the pieces
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <atomic>
#include <deque>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "transport/completion_queue.h"
#include "transport/fabric.h"
#include "transport/memory_registry.h"
#include "transport/op_lifecycle.h"
#include "transport/shm/outbox.h"
#include "transport/shm/region_table.h"
#include "transport/shm/setup.h"
#include "transport/tag_matcher.h"

namespace plait::transport::shm {

// A message nobody waited for yet (see TagMatcher). Eager payloads are copied in before the
// entry is visible, so entries are complete when they appear.
struct Unexpected : UnexpectedMessage {
  uint64_t sender_addr = 0;  // rendezvous with CMA: where to pull from
  bool cma = false;
};
using Matcher = TagMatcher<Op, Unexpected>;

class ShmFabric final : public Fabric, public InlineProgress, private OpLifecycle {
 public:
  ShmFabric(const FabricOptions& options, std::vector<int> peer_ranks, Attachment attachment,
            const CostModel& cost_model);
  ~ShmFabric() override;

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
  void post_recv(int peer, void* buf, size_t capacity, uint64_t tag, CompletionQueue* cq,
                 uint64_t context, std::shared_ptr<std::atomic<bool>> sibling);

  void write(int peer, const void* local, size_t len, const RemoteKey& rk, uint64_t remote_offset,
             std::optional<uint32_t> imm, CompletionQueue* cq, uint64_t context) override;
  void read(int peer, void* local, size_t len, const RemoteKey& rk, uint64_t remote_offset,
            CompletionQueue* cq, uint64_t context) override;
  bool gathers_writes(int peer) const override;
  void write_gathered(int peer, const std::vector<LocalPiece>& pieces, const RemoteKey& rk,
                      uint64_t remote_offset, std::optional<uint32_t> imm, CompletionQueue* cq,
                      uint64_t context) override;
  void fetch_add(int peer, uint64_t* result, const RemoteKey& rk, uint64_t remote_offset,
                 uint64_t add, CompletionQueue* cq, uint64_t context) override;
  void compare_swap(int peer, uint64_t* result, const RemoteKey& rk, uint64_t remote_offset,
                    uint64_t expected, uint64_t desired, CompletionQueue* cq,
                    uint64_t context) override;

  void set_imm_cq(CompletionQueue* cq) override;
  void cancel(CompletionQueue* cq) override;
  bool peer_failed(int peer) const override;
  std::string peer_failure(int peer) const override;

  // InlineProgress: a thread spinning on one of our queues drains our rings itself.
  void begin_polling() override;
  void end_polling() override;
  bool progress() override;

 private:
  struct Peer : PeerHealth {
    int rank = -1;
    uint32_t index = 0;  // in our peer list: our ring and pin counter for it
    PeerLink link;
    SegmentView view;       // the peer's segment
    Outbox outbox;          // our ring in its segment
    RingReader inbox;       // its ring in ours; drainer only
    RemoteRegions regions;  // its registration table
    std::atomic<bool> ring_broken{false};  // it wrote garbage: its ring is no longer read
    // Drainer only:
    std::unordered_set<uint64_t> denied_imm_writes;  // copy-fallback writes with a refused piece
    // Since when its process has been seen stopped (SIGSTOP, a debugger); epoch: running.
    Clock::time_point stopped_since{};
  };

  // A copy by cross-memory attach, done in chunks by the drainer so that no pass takes long,
  // a cancel waits at most one chunk, and a deregistration at most one pin.
  struct Transfer {
    enum class Kind { kPull, kWrite, kRead };
    Kind kind = Kind::kPull;
    OpRef op;
    Peer* peer = nullptr;
    uint64_t remote = 0;     // kPull: the sender's buffer; else the offset in the region
    uint64_t sender_op = 0;  // kPull: named in the FIN
    PinnedRegion region;     // kWrite/kRead: the peer's region (re-pinned per chunk)
    uint64_t key = 0;
    std::optional<uint32_t> imm;
    size_t done = 0;
  };

  // --- peers (shm_fabric.cc; the op lifecycle is OpLifecycle's) ---
  PeerHealth* health_of(int rank) const override;
  Peer* checked_peer(int peer, const char* what) const;
  Peer* peer_of(int rank) const { return peers_[index_of_[rank]].get(); }
  // Writes a control record to the peer now or queues it (never blocks).
  void send_record(Peer& p, const Record& r, std::string payload = {});
  Error denial(const Peer& p, const std::string& reason, const ErrorContext& ctx) const;

  // --- two-sided (two_sided.cc) ---
  // Incoming records: `r` is the drainer's private copy of the header (ring.h), `payload`
  // its r.payload bytes in the ring.
  void on_eager(Peer& p, const Record& r, const char* payload);
  void on_rts(Peer& p, const Record& r);
  void on_cts(Peer& p, const Record& r);
  void on_fin(Peer& p, const Record& r);
  void on_data(Peer& p, const Record& r, const char* payload);
  void on_send_aborted(Peer& p, const Record& r);
  void accept_rendezvous(const OpRef& recv, Peer& source, const Unexpected& request);
  bool step_pull(Transfer& t);

  // --- one-sided (rma.cc) ---
  void start_atomic(int peer, uint64_t* result, const RemoteKey& rk, uint64_t offset,
                    bool compare_swap, uint64_t arg0, uint64_t arg1, CompletionQueue* cq,
                    uint64_t context);
  // A write by cross-memory attach landed: tells the target, which delivers its immediate.
  void announce_write(Peer& p, uint64_t key, uint64_t offset, size_t len, uint32_t imm);
  void start_fallback_write(Peer& p, const OpRef& op, const RemoteKey& rk, uint64_t offset,
                            std::optional<uint32_t> imm);
  void start_fallback_read(Peer& p, const OpRef& op, const RemoteKey& rk, uint64_t offset);
  bool step_rma(Transfer& t);
  void on_write(Peer& p, const Record& r, const char* payload);
  void on_write_imm(Peer& p, const Record& r);
  void on_read_request(Peer& p, const Record& r);
  void on_atomic(Peer& p, const Record& r);
  void on_reply(Peer& p, const Record& r, const char* payload);
  void reply(Peer& p, Record r, const std::string& denial);
  // A CMA copy failed: the peer died (ESRCH), or the memory was not there.
  Error cma_error(Peer& p, int err, const char* call, const ErrorContext& ctx);

  // --- progress (progress.cc) ---
  bool pass();
  bool drain(Peer& p);
  void dispatch(Peer& p, const Record& r, const char* payload);
  bool step_transfers();
  void queue_transfer(Transfer t);
  void check_peers(bool pidfds);
  // Fails a peer whose process has stayed stopped for the peer timeout (drainer only).
  void check_stopped_peers(Clock::time_point now);
  Clock::time_point next_stop_check_{};  // drainer only
  void fail_peer(Peer& p, const std::string& why, bool orderly);
  bool has_work() const;
  void progress_loop();
  void sleep_until_rung(std::chrono::nanoseconds timeout);
  // Wakes our progress thread if it sleeps and nobody polls (or always, with `force`).
  void wake_self(bool force = false);

  SegmentHeader& own_header() const { return own_view_.header(); }

  const Config config_;
  Capabilities capabilities_;
  CostModel cost_model_;
  size_t eager_threshold_;

  std::shared_ptr<MemoryRegistry> registry_;
  SegmentView own_view_;  // before own_: made from the attachment before it is moved
  SharedMemory own_;
  CmaPermission cma_permission_;
  std::vector<std::unique_ptr<Peer>> peers_;  // by index in our peer list
  std::vector<int> index_of_;                 // by rank: index in peers_, or -1
  std::unique_ptr<RegionPublisher> publisher_;

  Matcher matcher_;

  // One drainer at a time: the progress thread or an inline poller (try-lock).
  std::mutex drain_mu_;
  std::mutex transfers_mu_;
  std::deque<Transfer> transfers_;  // guarded by transfers_mu_
  std::atomic<size_t> transfer_count_{0};
  // Set by the progress thread for the next pass (whoever runs it): look at the peers'
  // closed flags (kCheckClosed, after every wake-up), and at their pidfds too (kCheckAlive,
  // every ~100 ms).
  enum PeerCheck : int { kCheckNone = 0, kCheckClosed = 1, kCheckAlive = 2 };
  std::atomic<int> peer_check_due_{kCheckNone};
  std::vector<struct pollfd> pollfds_;  // drainer only

  std::atomic<bool> stop_requested_{false};
  std::thread progress_;
};

// The provider's cost model and the eager threshold derived from it.
CostModel shm_cost_model(const Config& config);

}  // namespace plait::transport::shm
