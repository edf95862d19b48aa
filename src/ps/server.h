// A parameter server rank: owns the shards of the partitions placed on it, a ring buffer per
// worker that workers write their pushes into, and a completion thread that does all the
// work: aggregates pushes straight from the rings, applies the update rule, hands slots back
// (credits), and answers pulls with one-sided writes into the workers' buffers.
//
// One thread owns the state below (the completion thread); registration, which adds shards,
// takes the same lock. Parameters a pull reply is being written from are never changed
// while the write is in flight: an update that would change them waits (its push stays in
// its slot) until the replies are done.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "plait/ps.h"
#include "plait/rdma.h"
#include "ps/aligned_buffer.h"
#include "ps/key_table.h"
#include "ps/service.h"
#include "ps/wire.h"

namespace plait::ps {

class PsServer {
 public:
  PsServer(rdma::Fabric& fabric, const Service& service, int index);
  ~PsServer();
  PsServer(const PsServer&) = delete;
  PsServer& operator=(const PsServer&) = delete;

  // The ring each worker writes into, by worker index (published at creation).
  std::vector<rdma::RemoteKey> ring_keys() const;
  // Starts the completion thread; after the rings are published.
  void start();
  // Registration: shards for the new keys' partitions placed here, initialised from `init`
  // (per key: the first worker's buffer, key 0 for zeros) by one-sided reads. Returns once
  // the values are in place.
  void add_keys(const KeyTable& table, const std::vector<const KeyInfo*>& keys,
                const std::vector<rdma::RemoteKey>& init);
  // Serves until every worker is done or has failed; throws kRemote naming failed workers.
  void wait_for_workers();
  Stats stats() const;

 private:
  // What a completion's context is: the top two bits say which of the server's own
  // operations it belongs to, the rest is that operation's id.
  enum class Ctx : uint64_t { kReply = 1, kControl = 2, kInbox = 3 };
  static uint64_t ctx(Ctx kind, uint64_t id) { return (static_cast<uint64_t>(kind) << 62) | id; }
  static Ctx ctx_kind(uint64_t context) { return static_cast<Ctx>(context >> 62); }
  static uint64_t ctx_id(uint64_t context) { return context & ((uint64_t{1} << 62) - 1); }

  struct Pull {
    int worker = 0;  // index
    wire::PullRequest request;
    std::chrono::steady_clock::time_point since;
  };
  struct Held {  // a push kept in its slot for later
    int worker = 0;
    uint32_t slot = 0;
  };
  struct Shard {
    uint32_t id = 0;
    std::string label;   // "key 7 (partition 2 of 4) on server rank 5"
    uint64_t key = 0;
    DataType dtype = DataType::kF32;
    Update update;
    size_t count = 0;
    size_t bytes = 0;    // in the key's type: what a push or a reply carries
    AlignedBuffer master;  // acc_type: the parameters
    AlignedBuffer accum;   // acc_type: BSP's round being aggregated; ASP's converted gradient
    AlignedBuffer serve;   // the key's type, for f16/bf16 (else replies come from master)
    AlignedBuffer m, v;    // optimizer state
    uint64_t steps = 0;    // updates applied (Adam's t)
    uint64_t rounds = 0;   // BSP: rounds applied
    std::vector<uint64_t> pushes;  // per worker: pushes applied (BSP: aggregated)
    std::vector<uint64_t> taken;   // per worker: pushes taken from the ring, dropped ones too
    AlignedBuffer late;            // acc_type: BSP backup's late pushes folded into the round
    int folded = 0;
    uint64_t dropped = 0;          // BSP backup: late pushes dropped
    std::vector<char> in_round;    // BSP: this worker's push is in the round being aggregated
    int contributors = 0;
    // BSP: the round's first push, left in its slot until the second comes, so that the two
    // are summed into the accumulator in one pass (a copy and an add are two).
    std::optional<Held> first;
    bool round_complete = false;   // BSP: aggregated, waiting for replies before it applies
    int replies_in_flight = 0;
    std::deque<Held> held;
    std::vector<Pull> waiting;
    const std::byte* reply_source() const { return serve.size() ? serve.data() : master.data(); }
  };

  void run();
  void handle(const rdma::Completion& c);
  void on_push(int worker, uint32_t slot, uint32_t partition, size_t bytes);
  void on_message(const rdma::Completion& c, size_t slot);
  void on_pull(int worker, const wire::PullRequest& request);
  void on_reply_done(const rdma::Completion& c);
  // Takes one push from its slot into the shard (false: it must wait in the slot).
  bool absorb(Shard& s, int worker, uint32_t slot);
  void apply_round(Shard& s);
  void after_change(Shard& s);  // runs held pushes, then answers pulls that may go now
  bool may_answer(const Shard& s, const Pull& p) const;
  uint64_t version(const Shard& s) const;
  void reply(Shard& s, const Pull& p);
  void release_slot(int worker, uint32_t slot);
  size_t credit_batch() const;
  void flush_credits(bool all);
  void check_health();
  void fail_pull(const Pull& p, ErrorCategory category, const std::string& why);
  void send_control(int worker, wire::Kind kind, const void* data, size_t len);
  void post_receive(size_t slot);
  const std::byte* slot_data(int worker, uint32_t slot) const {
    return rings_[worker].data() + static_cast<size_t>(slot) * service_.slot_bytes;
  }

  rdma::Fabric& fabric_;
  const Service service_;
  const int index_;
  const int rank_;
  std::unique_ptr<rdma::CompletionQueue> cq_;
  std::vector<AlignedBuffer> rings_;  // per worker
  std::vector<std::unique_ptr<rdma::MemoryRegion>> ring_regions_;
  std::unordered_map<uint64_t, int> ring_owner_;  // region key -> worker index

  // Posted receives for control messages from any worker.
  std::vector<std::array<std::byte, 128>> inbox_;
  // Control messages in flight, by context (freed at their completion).
  std::unordered_map<uint64_t, std::vector<std::byte>> outbox_;
  uint64_t next_message_ = 0;
  // Pull replies in flight, by context id.
  std::unordered_map<uint64_t, Pull> replies_;
  uint64_t next_reply_ = 0;

  mutable std::mutex mu_;
  std::condition_variable workers_changed_;
  std::vector<std::unique_ptr<Shard>> shards_;  // by global partition id (null: elsewhere)
  std::vector<std::vector<uint32_t>> freed_;    // per worker: slots to hand back
  // Per worker: slots holding a round's first push (Shard::first). One slot of every worker
  // is never parked: workers that push their keys in different orders would otherwise fill
  // their rings with firsts that each wait for a push the other has no slot left to send.
  std::vector<uint32_t> parked_;
  std::vector<char> done_;                      // per worker: said Done
  std::vector<std::string> failed_;             // per worker: why it failed, if it did
  Stats stats_;
  std::chrono::steady_clock::time_point next_check_;

  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace plait::ps
