// A parameter server worker: turns push, pull and push_pull calls into one-sided writes into
// its rings on the servers (one per partition, when the server has handed back a slot) and
// pull requests, and completes the calls' Works from a completion thread that takes the
// servers' replies, credits and failures.
//
// Per partition, pushes go out one at a time in call order (the server takes a worker's
// pushes of a partition in arrival order, so a push waits for the previous one's write to
// land). A pull asks for the state after this worker's pushes so far (its clock).
//
// A server that dies or an operation past its deadline aborts the worker: every pending
// operation fails, nothing more is read from or written into the callers' buffers, and later
// calls fail with kAborted.
#pragma once

#include <array>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/work_impl.h"
#include "plait/ps.h"
#include "plait/rdma.h"
#include "ps/key_table.h"
#include "ps/service.h"
#include "ps/slot_ring.h"
#include "ps/wire.h"

namespace plait::ps {

enum class OpKind : uint8_t { kPush, kPull, kPushPull };

class PsWorker {
 public:
  // `keys` is the store's key table; it outlives the worker.
  PsWorker(rdma::Fabric& fabric, const Service& service, int index, const KeyTable& keys);
  ~PsWorker();
  PsWorker(const PsWorker&) = delete;
  PsWorker& operator=(const PsWorker&) = delete;

  // The servers' rings for this worker, by server index; then the completion thread starts.
  void start(std::vector<rdma::RemoteKey> rings);
  // New keys' partitions (registration; no call is in flight then).
  void add_partitions(size_t total);
  // `keys` checked by the caller; data[i] / out[i] hold keys[i]'s values.
  PsWorkPtr submit(OpKind kind, const std::vector<const KeyInfo*>& keys,
                   const std::vector<const void*>& data, const std::vector<void*>& out);
  // Waits for pending operations (each bounded by its deadline), tells the servers.
  void finalize();
  Stats stats() const;

 private:
  struct Op;
  struct Task {
    std::shared_ptr<Op> op;
    uint32_t partition = 0;
    int server = 0;         // index
    const std::byte* src = nullptr;  // push: this partition's data
    size_t bytes = 0;
    wire::PullRequest request;      // pull: sent as is (stays put until its send completes)
    uint64_t clock_at_submit = 0;
  };
  struct Op {
    std::shared_ptr<class PsWorkImpl> work;
    std::string what;  // "push_pull of key 7"
    size_t bytes = 0;
    int tasks_left = 0;
    uint64_t version = UINT64_MAX;
    std::shared_ptr<const Error> error;
    std::vector<std::unique_ptr<rdma::MemoryRegion>> regions;  // the pull buffers
    std::chrono::steady_clock::time_point deadline;
  };
  struct PartitionState {
    uint64_t clock = 0;          // pushes submitted
    bool push_in_flight = false;
    std::deque<std::unique_ptr<Task>> pushes;  // waiting for the one in flight
  };
  // Completion contexts: top two bits say what it is, the rest its id.
  enum class Ctx : uint64_t { kPush = 1, kRequest = 2, kControl = 3, kDone = 0 };
  static uint64_t ctx(Ctx kind, uint64_t id) { return (static_cast<uint64_t>(kind) << 62) | id; }
  static Ctx ctx_kind(uint64_t c) { return static_cast<Ctx>(c >> 62); }
  static uint64_t ctx_id(uint64_t c) { return c & ((uint64_t{1} << 62) - 1); }

  void run();
  void handle(const rdma::Completion& c);
  void on_control(const rdma::Completion& c, int server);
  void on_reply(const rdma::Completion& c);
  // Moves the partition's next push, if its turn has come, to its server's ready queue.
  void pump_partition(uint32_t partition);
  // Writes ready pushes while their servers have free slots and the window has room, one
  // server after the other: the window is shared out over the servers, so every server's
  // link carries its share at once (in call order, the first partitions would take it all).
  void pump();
  bool window_has_room(size_t bytes) const {
    return service_.window_bytes == 0 || on_wire_ == 0 || on_wire_ + bytes <= service_.window_bytes;
  }
  // Writes a ready push into the next free slot of its server.
  void issue_push(std::unique_ptr<Task> task);
  void task_done(Task& task, std::shared_ptr<const Error> error, uint64_t version);
  void check_health();
  // Fails everything and stops all transfers (cancel): the callers' buffers are free again.
  // `culprit`'s Work gets `why`, the others an abort error that quotes it.
  void abort(const Error& why, const Op* culprit);
  void post_receive(int server);
  // An operation's failure with a server: "parameter server rank S failed: ..." when the
  // server is gone, the cause otherwise, in the operation's words.
  Error server_error(int server, const Error& cause, const Op& op) const;

  rdma::Fabric& fabric_;
  const KeyTable& keys_;
  const Service service_;
  const int index_;
  const int rank_;
  std::unique_ptr<rdma::CompletionQueue> cq_;
  std::vector<rdma::RemoteKey> rings_;
  std::vector<std::array<std::byte, wire::kMaxMessageBytes>> inbox_;  // per server

  mutable std::mutex mu_;
  std::vector<SlotRing> slots_;                         // per server
  // Per server: pushes whose turn has come, waiting for a slot or for room in the window.
  std::vector<std::deque<std::unique_ptr<Task>>> ready_;
  size_t on_wire_ = 0;   // bytes of pushes written and not landed yet
  int next_server_ = 0;  // where pump() looks first
  std::deque<PartitionState> parts_;  // by partition id (grows; never moves)
  std::unordered_map<uint64_t, std::unique_ptr<Task>> pushes_;   // in flight, by id
  std::unordered_map<uint64_t, std::unique_ptr<Task>> pulls_;    // requested, by request id
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> pull_by_dest_;  // (region key, offset) -> id
  std::vector<std::shared_ptr<Op>> ops_;  // pending
  std::vector<std::shared_ptr<Op>> finished_;  // to complete outside the lock
  uint64_t next_id_ = 1;
  std::vector<char> acked_;  // per server: DoneAck received
  std::shared_ptr<const Error> aborted_;
  Stats stats_;
  std::chrono::steady_clock::time_point next_check_;

  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace plait::ps
