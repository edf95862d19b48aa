// One-sided communication with RDMA (verbs) semantics: registered memory with keys, write
// (with an optional 32-bit immediate), read, 64-bit atomics, tagged send/recv, and completion
// queues. The same Fabric that carries plait's collectives, exposed for users and for plait's
// own services (the parameter server uses nothing else).
//
//   auto fabric = plait::rdma::Fabric::create(plait::bootstrap_from_env(30s));
//   auto cq = fabric->create_cq();
//   std::vector<float> window(1024);
//   auto region = fabric->register_memory(window.data(), 4096, plait::rdma::kAccessRemoteWrite);
//   std::vector<plait::rdma::RemoteKey> keys = fabric->exchange(region->remote_key());
//   fabric->write(peer, src, 64, keys[peer], /*offset=*/0, /*imm=*/7, *cq, /*context=*/1);
//   plait::rdma::Completion c;
//   if (!cq->wait(&c, 5s)) ...;        // c.ok(), or c.error says who and why
//
// Ownership and lifetime: a Fabric owns its connections and progress thread; queues and
// regions it created must be destroyed before it. Memory handed to an operation (a source, a
// destination, an atomic's result word) must stay valid and, for sources, unchanged until the
// operation's completion has been taken from its queue.
//
// Threads: every method may be called from any thread. A queue may be polled by several
// threads; each completion is taken once.
//
// Remote access is checked against the target's regions before any byte is touched: a key
// it does not know, an access outside the region's bounds, or one its access flags do not
// allow fails the initiator's operation with kInvalidUsage (naming key, offset, length and
// region size) and leaves the target's memory byte-for-byte unchanged. A peer that dies fails every pending
// operation involving it with kRemote naming the peer. Nothing waits without a timeout.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "plait/bootstrap.h"
#include "plait/error.h"

namespace plait::rdma {

// What peers may do to a region (local access is always allowed).
enum Access : uint32_t {
  kAccessLocal = 0,
  kAccessRemoteRead = 1u << 0,
  kAccessRemoteWrite = 1u << 1,
  kAccessRemoteAtomic = 1u << 2,
  kAccessAll = kAccessRemoteRead | kAccessRemoteWrite | kAccessRemoteAtomic,
};

// A region's descriptor: all a peer needs to address it. Plain data: send it in a message,
// through exchange(), a store or a file. `addr` is the region's base as its owner sees it;
// one-sided operations take an offset relative to it.
struct RemoteKey {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t key = 0;
};

// One piece of a gathered write's source (write_gathered).
struct LocalPiece {
  const void* data = nullptr;
  size_t length = 0;
};

enum class OpType : uint8_t {
  kSend,
  kRecv,
  kWrite,
  kRead,
  kFetchAdd,
  kCompareSwap,
  kRemoteWriteImm,  // target side: a peer's write with an immediate landed in our memory
};
std::string_view to_string(OpType op);  // "send", "write", "remote write+imm", ...

struct Completion {
  uint64_t context = 0;  // the caller's cookie (a verbs wr_id)
  OpType op = OpType::kSend;
  int peer = -1;         // the other side (kRecv: the actual source)
  size_t bytes = 0;      // bytes transferred (kRecv: the message's length)
  uint64_t tag = 0;      // kSend/kRecv: the message tag
  uint64_t header = 0;   // kRecv: the sender's header word
  uint32_t imm = 0;      // kRemoteWriteImm: the immediate
  uint64_t offset = 0;   // kRemoteWriteImm: where in the region the write landed
  uint64_t key = 0;      // kRemoteWriteImm: the region's key
  std::shared_ptr<const Error> error;  // null on success
  bool ok() const { return error == nullptr; }
};

// Where finished operations are reported. How wait() waits is the fabric's wait policy
// (PLAIT_WAIT: spin, block, or hybrid: spin a few microseconds, then sleep).
class CompletionQueue {
 public:
  virtual ~CompletionQueue() = default;
  // Takes one completion if there is one; never blocks.
  virtual bool poll(Completion* out) = 0;
  // Waits until a completion is there or `timeout` passes; false on timeout.
  virtual bool wait(Completion* out, std::chrono::microseconds timeout) = 0;
  // Wakes a thread blocked in wait() without a completion (its wait returns false).
  virtual void interrupt() = 0;

 protected:
  CompletionQueue() = default;
  // Only the queues a Fabric creates are made with this: a Fabric then knows its own queues
  // behind this interface without a dynamic_cast on every operation, and refuses the others.
  struct MadeByFabric {};
  explicit CompletionQueue(MadeByFabric) : made_by_fabric_(true) {}
  static bool made_by_fabric(const CompletionQueue& cq) { return cq.made_by_fabric_; }

 private:
  bool made_by_fabric_ = false;
};

class MemoryRegion {
 public:
  // Deregisters unless deregister() did; never returns while a peer may still access the
  // memory, so the caller may free it next.
  virtual ~MemoryRegion() = default;
  // From its return no peer accesses the memory. Throws Error(kTimeout) naming a peer that
  // still accesses it after the provider's bound (the memory must then stay allocated).
  virtual void deregister() = 0;
  virtual void* addr() const = 0;
  virtual size_t length() const = 0;
  virtual uint32_t access() const = 0;
  virtual RemoteKey remote_key() const = 0;
};

struct FabricOptions {
  // Store scope: fabrics alive at the same time in one job need different names; every
  // rank creates its n-th fabric of a name with the same options.
  std::string name = "rdma";
  // PLAIT_* settings laid over the environment for this fabric, as in CommunicatorOptions:
  // PLAIT_TRANSPORT, PLAIT_WAIT, PLAIT_TCP_STREAMS, PLAIT_CONNECT_TIMEOUT, ...
  std::map<std::string, std::string> settings;
};

class Fabric {
 public:
  // Collective over the bootstrap's ranks: connects to every peer (shared memory on this
  // host, TCP across hosts, or as PLAIT_TRANSPORT says). Throws within the connect timeout.
  static std::unique_ptr<Fabric> create(const Bootstrap& bootstrap, const FabricOptions& options = {});
  virtual ~Fabric() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "shm", "tcp", or "self" (our own rank: one-sided operations on it are refused).
  virtual std::string provider(int peer) const = 0;
  // The job-wide timeout (PLAIT_TIMEOUT): what exchange() and plait's services wait at most.
  virtual std::chrono::milliseconds timeout() const = 0;

  virtual std::unique_ptr<CompletionQueue> create_cq() = 0;
  // `access` is a mask of Access flags. Throws kInvalidUsage for a null or empty range.
  virtual std::unique_ptr<MemoryRegion> register_memory(void* addr, size_t length,
                                                        uint32_t access) = 0;
  // `length` bytes of zeroed memory at region->addr(), registered with `access`, of the kind
  // this fabric's peers reach fastest (MPI_Alloc_mem): over UCX, memory UCX allocates, which
  // its shared-memory transports map into the peers so that a write is a store; elsewhere
  // page-aligned anonymous memory. Regions registered inside it with register_memory() share
  // that, and must be destroyed before it. The memory is freed when the region is destroyed,
  // never before deregistration has succeeded. Throws kInvalidUsage for length 0.
  virtual std::unique_ptr<MemoryRegion> allocate_memory(size_t length, uint32_t access) = 0;

  // Collective: every rank gives its descriptors (the same number on every rank) and gets
  // everybody's, result[r] being rank r's. Blocks until all ranks called, or timeout().
  virtual std::vector<std::vector<RemoteKey>> exchange(const std::vector<RemoteKey>& mine) = 0;
  std::vector<RemoteKey> exchange(const RemoteKey& mine);

  // Two-sided, matched by (source, tag) in send order; `peer` of recv may be -1 (any source).
  // `header` is a word delivered with the message (Completion::header) whatever its length.
  virtual void send(int peer, const void* buf, size_t len, uint64_t tag, uint64_t header,
                    CompletionQueue& cq, uint64_t context) = 0;
  virtual void recv(int peer, void* buf, size_t capacity, uint64_t tag, CompletionQueue& cq,
                    uint64_t context) = 0;

  // One-sided. The initiator's completion means the target has applied the operation. A
  // write with `imm` also delivers a kRemoteWriteImm completion on the target's immediate
  // queue (set_imm_cq) once the data is in place.
  virtual void write(int peer, const void* local, size_t len, const RemoteKey& remote,
                     uint64_t offset, std::optional<uint32_t> imm, CompletionQueue& cq,
                     uint64_t context) = 0;
  virtual void read(int peer, void* local, size_t len, const RemoteKey& remote, uint64_t offset,
                    CompletionQueue& cq, uint64_t context) = 0;
  // A write whose source is `pieces`, in order, landing contiguously at `offset`: one
  // operation, one completion, one immediate, and no staging copy (the rows of a dispatch
  // go straight from where they lie into the peer's window). Only where the provider copies
  // straight out of the pieces, as gathers_writes(peer) says: shared memory with
  // cross-memory attach. Elsewhere it throws kInvalidUsage; pack, then write().
  virtual bool gathers_writes(int peer) const = 0;
  virtual void write_gathered(int peer, const std::vector<LocalPiece>& pieces,
                              const RemoteKey& remote, uint64_t offset,
                              std::optional<uint32_t> imm, CompletionQueue& cq,
                              uint64_t context) = 0;
  // 64-bit atomics on an 8-byte aligned remote word; the old value lands in *result.
  virtual void fetch_add(int peer, uint64_t* result, const RemoteKey& remote, uint64_t offset,
                         uint64_t add, CompletionQueue& cq, uint64_t context) = 0;
  virtual void compare_swap(int peer, uint64_t* result, const RemoteKey& remote,
                            uint64_t offset, uint64_t expected, uint64_t desired,
                            CompletionQueue& cq, uint64_t context) = 0;

  // Where kRemoteWriteImm completions go (null: dropped). Set it before peers write with
  // immediates.
  virtual void set_imm_cq(CompletionQueue* cq) = 0;
  // Fails every pending operation of `cq` with kAborted; on return nothing more is written
  // into their buffers.
  virtual void cancel(CompletionQueue& cq) = 0;

  // True once the peer's connection failed; why, as the provider saw it.
  virtual bool peer_failed(int peer) const = 0;
  virtual std::string peer_failure(int peer) const = 0;
};

// A completion thread: drains one queue on a thread of its own and hands each completion
// to `handler` (the "separate completion thread" of an RDMA design). The handler runs on
// that thread, one completion at a time; it must not throw. Stops and joins on destruction;
// destroyed (or stopped) from its own handler, it lets that call return and then ends by
// itself without touching the queue again (the handler and what it holds live until then).
class CompletionThread {
 public:
  using Handler = std::function<void(const Completion&)>;
  CompletionThread(CompletionQueue& cq, Handler handler);
  ~CompletionThread();
  CompletionThread(const CompletionThread&) = delete;
  CompletionThread& operator=(const CompletionThread&) = delete;
  // Stops after the completion being handled, if any; idempotent.
  void stop();

 private:
  struct Shared;  // what the thread itself holds: the stop flag and the handler
  CompletionQueue& cq_;
  std::shared_ptr<Shared> shared_;
  std::thread thread_;
};

}  // namespace plait::rdma
