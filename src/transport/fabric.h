// The Fabric: plait's transport interface with RDMA (verbs) semantics, made portable.
//
//   Fabric            one per process per job; owns the connections to every peer, the
//                     registered memory, and the progress engine (a progress thread).
//   MemoryRegion      memory registered for remote access; its RemoteKey {addr, len, key} is
//                     what a peer needs to write into or read from it.
//   CompletionQueue   where finished operations are reported; each operation names the queue
//                     and carries the caller's `context` (like a verbs wr_id) back.
//
// Operations never block the caller on the network: they are queued and complete later on
// the queue they name (a fast path may complete them before the call returns; the completion
// is still delivered through the queue). A provider never knows what a collective is.
//
// Ordering: two-sided messages from one sender to one receiver are *matched* in the order
// they were sent (like MPI's non-overtaking rule), even when their payloads are striped over
// several sockets.
//
// Errors: an operation that fails completes with `error` set (never throws from the
// progress thread). Invalid arguments detectable at the call (null buffer, unknown peer)
// throw plait::Error(kInvalidUsage) from the call itself.
//
// Remote access: every one-sided operation is checked against the target's key, the region's
// bounds and its access flags *before* any byte is touched (by the target, or by the initiator
// against the region the target published: shm, ucx); a violation fails the
// initiator's operation (kInvalidUsage, naming key, offset, length and region size) and leaves
// the target's memory untouched. A dead peer fails every pending operation involving it
// (kRemote, naming the peer and the OS error).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "plait/error.h"
#include "plait/rdma.h"
#include "plait/store.h"

namespace plait::transport {

class MemoryRegistry;

inline constexpr int kAnySource = -1;

// The public types of the one-sided API (include/plait/rdma.h) are the transport's own.
using rdma::Access;
using rdma::kAccessAll;
using rdma::kAccessLocal;
using rdma::kAccessRemoteAtomic;
using rdma::kAccessRemoteRead;
using rdma::kAccessRemoteWrite;
using rdma::Completion;
using rdma::LocalPiece;
using rdma::MemoryRegion;
using rdma::OpType;
using rdma::RemoteKey;
using rdma::to_string;

class PolicyCompletionQueue;

// The public queue (poll, wait, interrupt) and what the transport's own layers need of it.
class CompletionQueue : public rdma::CompletionQueue {
 public:
  CompletionQueue() : rdma::CompletionQueue(MadeByFabric{}) {}
  // The transport's queue behind a public one, or null if a fabric did not create it.
  static CompletionQueue* of(rdma::CompletionQueue& cq) {
    return made_by_fabric(cq) ? static_cast<CompletionQueue*>(&cq) : nullptr;
  }

  // The fabrics' own queue behind this interface, or null for another implementation:
  // providers need it on every operation, where a dynamic_cast would cost more than the rest
  // of a small operation's path.
  PolicyCompletionQueue* policy_queue() const { return policy_queue_; }

  // Sleeps (never spins, never takes a completion) until one is queued, an interrupt
  // arrives (consumed, as in wait()) or the timeout passes; true if a completion is queued.
  // For a background thread that must leave completions to whoever drives the work.
  virtual bool wait_ready(std::chrono::microseconds timeout) = 0;
  // As wait_ready(), and also returns once `*shared_word` no longer holds `seen`: a futex
  // word in memory shared between processes, bumped by another process that wants this
  // thread awake (a collective segment's doorbell). One sleep covers both events.
  virtual bool wait_ready_or(std::atomic<uint32_t>* shared_word, uint32_t seen,
                             std::chrono::microseconds timeout) = 0;
  // Brackets a consumer that calls poll() in a loop. Meanwhile pushes wake no sleeper (the
  // poller takes the completion anyway) and an inline-progress provider is told that
  // someone polls it; the end wakes a sleeper if completions are left over.
  virtual void begin_active_polling() = 0;
  virtual void end_active_polling() = 0;
  // A consumer that polled (and ended its polling) is going to sleep with its work not
  // done: a provider progressed inline gets its own thread back on the job at once.
  virtual void hand_off_progress() = 0;
  // Counts events that moved work forward: completions pushed, and polls whose inline
  // progress pass did something (bytes of a large message came in, say). A hybrid waiter
  // keeps spinning while it grows: its budget is for a quiet wait, not for a transfer.
  virtual uint64_t activity() const = 0;

 protected:
  PolicyCompletionQueue* policy_queue_ = nullptr;  // set by PolicyCompletionQueue
};

// What a provider can do, stated up front (not "not implemented" at run time).
struct Capabilities {
  std::string provider;     // "tcp"
  bool tagged = true;       // two-sided tagged send/recv
  bool rma = true;          // one-sided write/read
  bool write_imm = true;
  bool atomics = true;
  bool any_source = true;
  int streams_per_peer = 1;
  // allocate_memory() gives memory this provider reaches faster than the user's own.
  bool own_memory = false;
};

// The provider's alpha-beta model: sending n bytes costs alpha_us + n / beta_Bpus. The eager
// threshold is where rendezvous' extra round trip is paid back by avoiding a copy.
struct CostModel {
  double alpha_us = 20.0;       // latency of a small message, microseconds
  double beta_bytes_per_us = 1000.0;  // bandwidth, bytes per microsecond (1000 = 1 GB/s)
  double copy_bytes_per_us = 5000.0;  // memcpy bandwidth on the receiver
  // The host's reduction rate (bytes of one operand per us), not the provider's: carried here
  // so that one struct brings every measured constant (tuned_costs.h) to the cost model.
  double gamma_bytes_per_us = 4000.0;
  // A round of a collective over the communicator's shared segment (flags only, no
  // messages): what a one-round barrier on it costs. A host value, like gamma.
  double flag_us = 0.3;
  size_t eager_threshold = 64 * 1024;
  // The network between hosts, from the tune file's "net" scope (`plait tune --topology`):
  // coll::CostParams::host_contention and ring_contention. Empty: a non-blocking network.
  std::vector<double> host_contention;
  double ring_contention = 1;
};

struct FabricOptions {
  int rank = 0;
  int size = 1;
  std::shared_ptr<Store> store;  // for exchanging addresses; keys are scoped by `name`
  std::string name = "fabric";   // store scope, unique per fabric in a job
  std::string job_token;         // every connection proves it knows it (HMAC challenge)
  // A host whose route picks the address peers should use to reach us (the store's host);
  // PLAIT_TCP_IFNAME (TcpSettings::interface) wins over it. Empty: 127.0.0.1.
  std::string route_hint;
  Config config;
  // The fabric ranks this provider serves; empty means every other rank. A composite fabric
  // gives each provider its part (shm: the ranks on this host, tcp: the others); an
  // operation naming a rank outside the set throws kInvalidUsage.
  std::vector<int> peers;
  // Shared by the providers of one composite fabric, so a region has one key for all of
  // them; null: the provider makes its own.
  std::shared_ptr<MemoryRegistry> registry;
};

class Fabric {
 public:
  virtual ~Fabric() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const Capabilities& capabilities() const = 0;
  virtual const CostModel& cost_model() const = 0;

  virtual std::unique_ptr<CompletionQueue> create_cq() = 0;
  virtual std::unique_ptr<MemoryRegion> register_memory(void* addr, size_t length,
                                                        uint32_t access) = 0;
  // `length` bytes of zeroed memory, registered with `access`, that this fabric's peers
  // reach fastest (the UCX provider: memory UCX allocates, which its shared-memory transports
  // map into peers, so a write is a store instead of a system call). Freed when the region
  // is destroyed. Default: page-aligned anonymous memory (allocated_memory.h).
  virtual std::unique_ptr<MemoryRegion> allocate_memory(size_t length, uint32_t access);

  // Two-sided. The receiver's buffer must be at least the message's length, else the recv
  // completes with a truncation error. `peer` for recv may be kAnySource.
  virtual void send(int peer, const void* buf, size_t len, uint64_t tag, uint64_t header,
                    CompletionQueue* cq, uint64_t context) = 0;
  virtual void recv(int peer, void* buf, size_t capacity, uint64_t tag, CompletionQueue* cq,
                    uint64_t context) = 0;

  // A receive from any source posted on several providers at once (by a composite fabric):
  // every copy shares `sibling`; the first copy to match a message, or to fail, completes
  // and the others vanish without a completion (and never touch `buf`).
  virtual void recv_any_sibling(void* buf, size_t capacity, uint64_t tag, CompletionQueue* cq,
                                uint64_t context, std::shared_ptr<std::atomic<bool>> sibling) = 0;

  // One-sided. `remote_offset` is relative to rk.addr. A write with `imm` also delivers a
  // kRemoteWriteImm completion on the target's immediate queue (set_imm_cq) after the data
  // is in place. Initiator completions mean the target has applied the operation.
  virtual void write(int peer, const void* local, size_t len, const RemoteKey& rk,
                     uint64_t remote_offset, std::optional<uint32_t> imm, CompletionQueue* cq,
                     uint64_t context) = 0;
  virtual void read(int peer, void* local, size_t len, const RemoteKey& rk,
                    uint64_t remote_offset, CompletionQueue* cq, uint64_t context) = 0;
  // A write gathered from `pieces` (rdma::Fabric::write_gathered). Only providers that copy
  // straight out of the pieces implement it and say so in gathers_writes(peer); the default
  // refuses with kInvalidUsage.
  virtual bool gathers_writes(int /*peer*/) const { return false; }
  virtual void write_gathered(int peer, const std::vector<LocalPiece>& pieces, const RemoteKey& rk,
                              uint64_t remote_offset, std::optional<uint32_t> imm,
                              CompletionQueue* cq, uint64_t context);
  // 64-bit atomics on an 8-byte aligned remote word; the old value lands in *result.
  virtual void fetch_add(int peer, uint64_t* result, const RemoteKey& rk,
                         uint64_t remote_offset, uint64_t add, CompletionQueue* cq,
                         uint64_t context) = 0;
  virtual void compare_swap(int peer, uint64_t* result, const RemoteKey& rk,
                            uint64_t remote_offset, uint64_t expected, uint64_t desired,
                            CompletionQueue* cq, uint64_t context) = 0;

  // Where kRemoteWriteImm completions go; without one they are dropped (with a debug log).
  virtual void set_imm_cq(CompletionQueue* cq) = 0;

  // Cancels every pending operation that would complete on `cq`: posted receives are
  // removed, in-flight incoming data for them is discarded instead of written. On return no
  // byte will be written into those buffers any more; the cancelled operations complete with
  // kAborted errors. Used when a communicator aborts, so user memory is never touched after.
  virtual void cancel(CompletionQueue* cq) = 0;

  // True once the peer's connection failed (died, closed, reset).
  virtual bool peer_failed(int peer) const = 0;
  // Why the peer failed, as the provider saw it ("rank 2 (pid 41) died without shutting down
  // its fabric ..."); empty while it has not. For errors raised above the fabric.
  virtual std::string peer_failure(int peer) const = 0;
};

}  // namespace plait::transport
