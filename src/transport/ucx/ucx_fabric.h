// The UCX provider's Fabric: plait's verbs-like interface over UCP, so that a job uses the
// NIC it has (InfiniBand, RoCE through UCX's rc/dc/ud transports; UCX's tcp and shared memory
// elsewhere). Its implementation is split by responsibility:
//
//   ucx_fabric.cc   construction, capabilities, cost model, cancel, peer state
//   worker.cc       the UCP context and worker, address exchange through the store, endpoints
//                   (error handling mode peer), the hello that proves every peer reachable,
//                   orderly close
//   two_sided.cc    tagged send/recv as UCP active messages matched by plait's TagMatcher
//   rma.cc          write / read / atomics by UCP put / get / atomics, checked by the
//                   initiator against the target's region (fetched with its remote key)
//   remote_keys.cc  the target's side: regions mapped with ucp_mem_map, packed keys served
//                   on request, revoked (and flushed by every holder) before deregistration
//   progress.cc     the progress thread (the worker's wake-up fd), inline progress by
//                   pollers, endpoint errors
//
// One lock (worker_mu_) serializes every call into the worker (UCS_THREAD_MODE_SERIALIZED):
// the caller's thread posts operations itself, the progress thread or a polling caller runs
// ucp_worker_progress(), and the active-message callbacks run inside it, under the lock.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/futex_mutex.h"
#include "core/socket.h"
#include "transport/completion_queue.h"
#include "transport/fabric.h"
#include "transport/memory_registry.h"
#include "transport/op_lifecycle.h"
#include "transport/tag_matcher.h"
#include "transport/ucx/wire.h"

namespace plait::transport::ucx {

// An unexpected message: an eager one's payload copied, a rendezvous one's UCP descriptor
// kept until its receive is posted (then ucp_am_recv_data_nbx moves it straight in).
struct Unexpected : UnexpectedMessage {
  void* rndv_desc = nullptr;
};
using Matcher = TagMatcher<Op, Unexpected>;

// The UCP objects of one fabric (worker.cc), destroyed in order.
struct Worker {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::vector<ucp_ep_h> eps;  // by rank; null for us and ranks another provider serves
  int efd = -1;               // the worker's wake-up fd (not ours to close)
  std::string transports;     // what UCX chose, for logs and `plait info`
  void reset();
  // Forgets the worker and context without destroying them (left to the process's exit).
  void abandon() { worker = nullptr, context = nullptr; }
  ~Worker() { reset(); }
};

class UcxFabric final : public Fabric,
                        public InlineProgress,
                        private OpLifecycle,
                        private RegistryListener {
 public:
  explicit UcxFabric(const FabricOptions& options);
  ~UcxFabric() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const Capabilities& capabilities() const override { return capabilities_; }
  const CostModel& cost_model() const override { return cost_model_; }

  std::unique_ptr<CompletionQueue> create_cq() override;
  std::unique_ptr<MemoryRegion> register_memory(void* addr, size_t length,
                                                uint32_t access) override;
  // Memory UCX allocates (ucp_mem_map with UCP_MEM_MAP_ALLOCATE, as ucx_perftest uses):
  // its shared-memory transports map it into peers, so a put is a store. remote_keys.cc.
  std::unique_ptr<MemoryRegion> allocate_memory(size_t length, uint32_t access) override;

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

  // InlineProgress (progress.cc): a caller polling one of our queues progresses the worker
  // itself, so a small message costs no thread wake-up.
  void begin_polling() override;
  void end_polling() override;
  bool progress() override;
  // A transfer of `bytes` starts: polling counts as busy for its expected duration.
  void expect_transfer(size_t bytes);
  void hand_off() override;

  // The transports UCX chose for this fabric's endpoints ("tcp", "posix,cma", ...).
  const std::string& transports() const { return w_.transports; }

 private:
  struct Peer : PeerHealth {
    bool said_goodbye = false;  // under worker_mu_
    // A peer on this host has an endpoint in error mode none (UCX 1.13's shared-memory
    // transports have no mode peer; in mode peer its tcp loses zero-copy rendezvous): its
    // process is watched through a pidfd instead (worker.cc, create_endpoint).
    net::Fd pidfd;
    int pid = 0;
  };
  // What a one-sided op asks for, kept while its region's key is fetched.
  struct RmaArgs {
    OpType type = OpType::kWrite;
    uint64_t key = 0;
    uint64_t offset = 0;
    uint64_t length = 0;
    uint64_t arg0 = 0;  // fetch_add: the addend; compare_swap: the expected value
    uint64_t arg1 = 0;  // compare_swap: the desired value
    std::optional<uint32_t> imm;
  };
  // A peer's region as this initiator knows it: fetched once per (peer, key), checked
  // locally before every access, forgotten when the target revokes it.
  struct RemoteRegion {
    bool ready = false;
    uint64_t base = 0, length = 0;
    uint32_t access = 0;
    ucp_rkey_h rkey = nullptr;
    std::vector<std::pair<OpRef, RmaArgs>> waiting;  // until the key arrives
  };
  // One of our regions as UCX sees it.
  struct LocalRegion {
    RegionRef region;
    ucp_mem_h memh = nullptr;
    bool owns_memh = true;   // false: an allocation's (allocations_), unmapped with it
    void* packed = nullptr;  // the packed remote key (ucp_rkey_pack)
    size_t packed_bytes = 0;
    std::string map_error;   // why UCX could not map it (then every request is denied)
    std::set<int> holders;   // peers we gave the key to
    std::set<int> revoking;  // holders that have not confirmed the revocation yet
    bool removing = false;   // being deregistered: no more keys handed out
  };
  // A UCP request in flight for an op: its completion callback finds the op here, cancel()
  // and shutdown find the requests of ops they end. Under worker_mu_.
  struct InFlight {
    OpRef op;      // null for the target's replies and setup messages
    int peer = -1;  // whom a send goes to
    // Bytes UCX reads or writes until the request is done, when they are ours: a message's
    // header and payload, an atomic's operand and result. Allocated once (a vector moved
    // into the map keeps its heap buffer).
    std::vector<char> header;
    std::vector<char> payload;
    MessageHeader* message_header = nullptr;  // a send's header slot (take_header_slot)
    RmaArgs rma;                // a key being fetched or revoked
    std::vector<std::pair<OpRef, RmaArgs>> writes;  // the writes a flush completes
    ucp_rkey_h rkey = nullptr;  // a revoked key, destroyed once its accesses are flushed
    void (*done)(UcxFabric& f, InFlight& in, ucs_status_t status) = nullptr;
  };

  PeerHealth* health_of(int rank) const override;

  // --- worker.cc ---
  void setup_worker(const FabricOptions& options);
  void exchange_hellos(const FabricOptions& options);
  void create_endpoint(const FabricOptions& o, int peer, const Bytes& address);
  bool close_endpoints();
  void set_handler(AmId id, ucp_am_recv_callback_t cb);

  // --- requests (two_sided.cc) ---
  // Tracks a UCP send/recv request (or finishes at once for NULL / an error pointer):
  // `done(status)` runs once UCX completes it, under worker_mu_.
  using RequestDone = void (*)(UcxFabric& f, InFlight& in, ucs_status_t status);
  void track(ucs_status_ptr_t request, InFlight in, RequestDone done);
  // UCX 1.13 reads an active message's header until the send completes: it lives in the
  // InFlight from before the call.
  void send_tracked(int peer, AmId id, InFlight in, const void* data, size_t bytes,
                    RequestDone done, uint32_t flags = 0);
  static void on_request_done(void* request, ucs_status_t status, void* user_data);
  static void on_recv_data_done(void* request, ucs_status_t status, size_t length,
                                void* user_data);
  ucp_request_param_t send_param(uint32_t flags = 0);
  // Sends an active message on `peer`'s endpoint; under worker_mu_.
  ucs_status_ptr_t am_send(int peer, AmId id, const void* header, size_t header_bytes,
                           const void* data, size_t bytes, uint32_t flags = 0);
  // The op's UCP request failed or was cancelled: fail it with UCX's reason (the peer's
  // failure where it failed).
  void fail_with_status(Op& op, ucs_status_t status, const char* what);
  Error status_error(int peer, ucs_status_t status, const char* what, ErrorContext context) const;
  // A stable home for a send's header while UCX holds it; back to free_headers_ once the
  // send is done. Under worker_mu_.
  MessageHeader* take_header_slot();

  // --- two-sided (two_sided.cc) ---
  void post_recv(int peer, void* buf, size_t capacity, uint64_t tag, CompletionQueue* cq,
                 uint64_t context, std::shared_ptr<std::atomic<bool>> sibling);
  // A receive matched a rendezvous message: pulls it into the receive buffer and returns
  // UCS_INPROGRESS, or returns UCS_OK when it is to be dropped (truncation, cancelled): an
  // active-message callback returns that, a caller holding the descriptor releases it.
  // Under worker_mu_.
  ucs_status_t receive_rendezvous(const OpRef& recv, void* desc, uint64_t length);
  static ucs_status_t on_message(void* arg, const void* header, size_t header_bytes, void* data,
                                 size_t length, const ucp_am_recv_param_t* param);

  // --- one-sided, the initiator (rma.cc) ---
  void start_rma(const OpRef& op, const RmaArgs& a);
  // With the region's key at hand: checks the access against the region, then posts it.
  // Under worker_mu_.
  void issue_rma(const OpRef& op, const RmaArgs& a, const RemoteRegion& r);
  void post_write(const OpRef& op, const RmaArgs& a, const RemoteRegion& r);
  // Flushes `peer`'s endpoint for the writes posted since the last flush began: one flush in
  // flight per peer, so a stream of writes costs a flush per batch, not per write.
  void flush_writes(int peer);
  // A flush is done: completes its writes (or sends their immediates).
  void writes_flushed(InFlight& in, ucs_status_t status);
  void post_atomic(const OpRef& op, const RmaArgs& a, const RemoteRegion& r);
  // The key request to `peer` for `key` failed: its waiting ops fail with `why`.
  void fail_waiting(int peer, uint64_t key, const std::string& why);
  static ucs_status_t on_key_reply(void* arg, const void* header, size_t header_bytes,
                                   void* data, size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t on_key_revoke(void* arg, const void* header, size_t header_bytes,
                                    void* data, size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t on_imm_done(void* arg, const void* header, size_t header_bytes,
                                  void* data, size_t length, const ucp_am_recv_param_t* param);
  // Destroys the keys of peers' regions (shutdown, with the worker still there).
  void forget_remote_regions();

  // --- one-sided, the target (remote_keys.cc) ---
  // RegistryListener: every registered region is mapped with ucp_mem_map (the NIC may
  // access it: on InfiniBand, this is the registration); removal revokes the key from every
  // peer that holds it and waits until each has flushed its accesses.
  void on_add(const RegionRef& region) override;
  std::string on_remove(const RegionRef& region) override;
  void unmap(LocalRegion& r);
  void unmap_all();
  static ucs_status_t on_key_request(void* arg, const void* header, size_t header_bytes,
                                     void* data, size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t on_key_revoked(void* arg, const void* header, size_t header_bytes,
                                     void* data, size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t on_imm(void* arg, const void* header, size_t header_bytes, void* data,
                             size_t length, const ucp_am_recv_param_t* param);

  // --- progress and failure (progress.cc) ---
  void start_progress();
  // A watched peer's process exited (its pidfd is readable): fails it.
  void check_exited(int peer);
  // Handles what epoll reported; with worker_mu_ not held.
  void handle_events(const struct epoll_event* events, int n);
  void progress_loop();
  enum class ParkEnd { kWoken, kIdle };
  // Waits while callers poll: kIdle when a whole check period passed without a poll pass.
  ParkEnd park();
  // With worker_mu_ held: progresses until the worker has nothing more to do right now.
  bool drain_locked();
  void wake_progress();
  static void on_endpoint_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t on_goodbye(void* arg, const void* header, size_t header_bytes, void* data,
                                 size_t length, const ucp_am_recv_param_t* param);
  void fail_peer(int peer, const std::string& why, bool orderly);
  // The rank in an incoming header, if it is one this provider serves; else logs and -1.
  int checked_source(int32_t source, const char* what) const;
  // Waits (progressing) until every request of ops in `ops` has finished in UCX, or the
  // timeout: after cancel(), UCX must not touch their buffers any more.
  void await_requests(const std::vector<OpRef>& ops);

  const Config config_;
  Capabilities capabilities_;
  CostModel cost_model_;
  std::shared_ptr<MemoryRegistry> registry_;
  Matcher matcher_;
  std::vector<std::unique_ptr<Peer>> peers_;  // null for us and ranks we do not serve

  FutexMutex worker_mu_;
  std::unordered_map<void*, InFlight> in_flight_;  // by UCP request; worker_mu_
  std::vector<bool> hello_from_;                   // setup; worker_mu_
  std::map<std::pair<int, uint64_t>, RemoteRegion> remote_regions_;  // (peer, key); worker_mu_
  std::unordered_map<uint64_t, LocalRegion> local_regions_;          // by key; worker_mu_
  // allocate_memory()'s memory by base address: a region registered inside one is packed
  // from the allocation's handle, so peers reach it the way they reach the allocation.
  // worker_mu_
  struct Allocation {
    ucp_mem_h memh = nullptr;
    size_t length = 0;
  };
  std::map<uintptr_t, Allocation> allocations_;
  struct WriteFlush {
    bool in_flight = false;
    std::vector<std::pair<OpRef, RmaArgs>> next;  // posted since the flush in flight began
  };
  std::vector<WriteFlush> write_flushes_;  // by rank; worker_mu_
  // Sends' headers (UCX 1.13 reads an active message's header until the send completes and
  // has no flag to copy it): slots that never move, reused. worker_mu_
  std::vector<std::unique_ptr<MessageHeader>> header_storage_;
  std::vector<MessageHeader*> free_headers_;
  bool listening_ = false;  // we are the registry's listener
  // After what its callbacks touch: a worker destroyed by a failed constructor may still
  // complete requests.
  Worker w_;
  net::Fd epoll_;       // the worker's wake-up fd, ours, watched processes
  net::Fd park_epoll_;  // ours and watched processes: while callers poll
  std::atomic<bool> stop_requested_{false};
  std::atomic<int> pollers_{0};
  std::atomic<bool> sleeping_{false};  // the progress thread waits on the wake-up fd
  std::atomic<bool> parked_{false};    // the progress thread steps aside for pollers
  std::atomic<bool> handed_off_{false};  // a poller went to sleep: the worker is ours again
  std::atomic<uint64_t> poll_passes_{0};  // progress() calls, to tell pollers that poll
  std::atomic<bool> inline_draining_{false};  // a poller is inside progress()
  std::atomic<int64_t> transfer_until_{0};  // Clock ticks: see expect_transfer()
  net::Fd wake_fd_;
  std::thread progress_;
  // Expires with the fabric: an allocation freed after it (against the contract) is left
  // to the process's exit instead of touching a destroyed worker.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

// The provider's default cost model (UCX over loopback tcp or shared memory; `plait tune
// --providers ucx` measures the real one).
CostModel ucx_cost_model(const Config& config);

}  // namespace plait::transport::ucx
