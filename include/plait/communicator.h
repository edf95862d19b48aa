// Communicators and their collectives.
//
// A Communicator is a group of ranks that can run collectives together. It is created from a
// Bootstrap (collectively: every rank of the group must call), owns its connections (through
// a fabric shared with communicators split from it) and a background executor thread.
//
// Every operation is non-blocking: it checks its arguments, queues the call and returns a
// Work handle. Collectives on one communicator run and complete in the order they were
// issued, so every rank must issue them in the same order (like NCCL/MPI). send/recv are not
// queued behind collectives: a recv posted before the matching send is fine (batch_isend_irecv).
//
// Buffers: the caller keeps them alive and untouched until the Work completes. Pass the same
// pointer as `send` and `recv` (or send == nullptr) for in-place operation. Counts are in
// elements of `dtype`.
//
// Errors: argument errors throw plait::Error(kInvalidUsage) from the call. Everything else
// (timeouts, dead peers, collectives that differ across ranks) fails the Work, whose wait()
// throws, and aborts the communicator: every rank in it gets an error naming the rank, the
// peer and the operation, and later calls fail fast with kAborted. Nothing calls abort().
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "plait/bootstrap.h"
#include "plait/error.h"
#include "plait/types.h"
#include "plait/work.h"

namespace plait {

inline constexpr int kUndefinedColor = -1;

// Per-call knobs; defaults come from the communicator's Config (PLAIT_* variables).
struct CallOptions {
  std::string algorithm;                  // "" or "auto": cost model; else "ring", "naive", ...
  std::chrono::milliseconds timeout{0};   // 0: the communicator's timeout
  // Record when the call started and finished (Work::times()): two clock reads.
  bool timed = false;
};

struct CommunicatorOptions {
  std::chrono::milliseconds timeout{0};  // 0: PLAIT_TIMEOUT
  std::string name = "world";            // store scope; must be unique among live groups
  // PLAIT_* settings by variable name, laid over the process environment for this
  // communicator and every one split or subgrouped from it, e.g.
  //   {{"PLAIT_TRANSPORT", "tcp"}, {"PLAIT_ALGO_ALLREDUCE", "ring"}, {"PLAIT_TIMEOUT", "30s"}}.
  // Names, syntax and checks are those of the environment variables (`plait info` lists
  // them); an empty value means the built-in default. A nonzero `timeout` above wins over
  // PLAIT_TIMEOUT. Settings of the process or the launcher rather than of a communicator
  // (PLAIT_LOG, PLAIT_RUN_GRACE_S, PLAIT_STORE_MAX_HANDSHAKES) are refused, as are unknown
  // names and values that do not parse: create() throws Error(kInvalidUsage) naming them,
  // before it contacts any peer.
  std::map<std::string, std::string> settings;
};

class Communicator;

// What Communicator::shrink() returns on each survivor.
struct ShrinkResult {
  std::shared_ptr<Communicator> comm;  // the survivors, in their old order
  std::vector<int> survivors;          // old ranks: new rank i was survivors[i]
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  // Collective over the bootstrap's ranks.
  static std::shared_ptr<Communicator> create(const Bootstrap& bootstrap,
                                              const CommunicatorOptions& options = {});

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;

  virtual WorkPtr allreduce(const void* send, void* recv, size_t count, DataType dtype,
                            ReduceOp op, const CallOptions& opts = {}) = 0;
  // recv is only written on root; non-roots may pass nullptr.
  virtual WorkPtr reduce(const void* send, void* recv, size_t count, DataType dtype,
                         ReduceOp op, int root, const CallOptions& opts = {}) = 0;
  // send is only read on root; every rank's recv gets root's data.
  virtual WorkPtr broadcast(const void* send, void* recv, size_t count, DataType dtype,
                            int root, const CallOptions& opts = {}) = 0;
  // recv holds size()*count elements, rank r's block at r*count.
  virtual WorkPtr allgather(const void* send, void* recv, size_t count, DataType dtype,
                            const CallOptions& opts = {}) = 0;
  // recv holds sum(recv_counts); rank r's block starts at sum(recv_counts[0..r)). In place:
  // send == nullptr and this rank's block already sits at its offset in recv.
  virtual WorkPtr allgatherv(const void* send, void* recv, const std::vector<size_t>& recv_counts,
                             DataType dtype, const CallOptions& opts = {}) = 0;
  // send holds size()*recv_count elements; recv gets the reduction of block rank().
  virtual WorkPtr reduce_scatter(const void* send, void* recv, size_t recv_count,
                                 DataType dtype, ReduceOp op, const CallOptions& opts = {}) = 0;
  virtual WorkPtr reduce_scatterv(const void* send, void* recv,
                                  const std::vector<size_t>& recv_counts, DataType dtype,
                                  ReduceOp op, const CallOptions& opts = {}) = 0;
  // Block p of send (count elements) goes to rank p; block p of recv comes from rank p.
  virtual WorkPtr alltoall(const void* send, void* recv, size_t count, DataType dtype,
                           const CallOptions& opts = {}) = 0;
  virtual WorkPtr alltoallv(const void* send, const std::vector<size_t>& send_counts,
                            const std::vector<size_t>& send_displs, void* recv,
                            const std::vector<size_t>& recv_counts,
                            const std::vector<size_t>& recv_displs, DataType dtype,
                            const CallOptions& opts = {}) = 0;
  // recv (size()*count, on root only) gets every rank's send block in rank order.
  virtual WorkPtr gather(const void* send, void* recv, size_t count, DataType dtype, int root,
                         const CallOptions& opts = {}) = 0;
  // root's send (size()*count) is split; every rank gets its block in recv.
  virtual WorkPtr scatter(const void* send, void* recv, size_t count, DataType dtype, int root,
                          const CallOptions& opts = {}) = 0;
  virtual WorkPtr barrier(const CallOptions& opts = {}) = 0;

  // Point to point, matched by (source, tag) in posting order; `peer` of recv may be
  // kAnySource. tag must be below 2^31.
  virtual WorkPtr send(const void* buf, size_t count, DataType dtype, int peer, uint32_t tag,
                       const CallOptions& opts = {}) = 0;
  virtual WorkPtr recv(void* buf, size_t count, DataType dtype, int peer, uint32_t tag,
                       const CallOptions& opts = {}) = 0;

  // Collective: ranks with the same color form a new communicator, ordered by (key, rank).
  // Returns nullptr on ranks that pass kUndefinedColor.
  virtual std::shared_ptr<Communicator> split(int color, int key) = 0;
  // A communicator of the given ranks of this one (new rank i is ranks[i]), sharing its
  // connections. Unlike split, only the members call it (all with the same list, and in the
  // same order relative to the other subgroups they create); the others need not take part,
  // as torch.distributed.new_group expects. Blocks until the members agree on the new group's
  // identity, or the timeout.
  virtual std::shared_ptr<Communicator> subgroup(const std::vector<int>& ranks) = 0;

  // In-job recovery after ranks died, as ULFM's MPI_Comm_shrink: every survivor calls it
  // (usually after an operation failed with kRemote or kAborted naming a dead rank) and gets
  // a communicator of the ranks still alive, over the same connections. Every survivor gets
  // the same member list: they agree through the rendezvous store, so the store must outlive
  // the dead (`plait run` serves it; a store hosted by a rank that died cannot). A rank counts
  // as dead once some survivor's transport saw its connection fail; shrink waits for every
  // other rank to call it, up to the timeout, then goes on without those that did not (they
  // get kAborted if they call later). Works on a healthy communicator too (nobody is left
  // out). This communicator stays as it is; the caller drops it.
  virtual ShrinkResult shrink(const CallOptions& opts = {}) = 0;

  // Fails every pending and future operation with kAborted and tells the peers, whose
  // pending operations on this communicator fail too. Safe to call from any thread.
  virtual void abort(const std::string& reason) = 0;
};

}  // namespace plait
