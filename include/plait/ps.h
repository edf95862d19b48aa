// The parameter server: the other half of distributed training (allreduce is one half).
// Some ranks are servers that own shards of the parameters; the others are workers that
// push gradients and pull parameters back.
//
//   auto kv = plait::ps::KVStore::create(plait::bootstrap_from_env(30s), {.servers = 2});
//   kv->register_key(7, weights.size(), plait::DataType::kF32,
//                    {.update = {.rule = plait::ps::Rule::kSgd, .lr = 0.1f}, .init = weights.data()});
//   if (kv->is_server()) { kv->finalize(); return; }       // serves until the workers finish
//   for (step ...) kv->push_pull(7, grads.data(), weights.data())->wait();
//   kv->finalize();
//
// Data path (docs/ps.md): a worker writes each push with one-sided writes straight from its
// buffer into its own ring buffer on the server, the immediate naming the partition; the
// server's completion thread aggregates from the ring into the key's accumulator, and answers
// a pull with a one-sided write into the worker's buffer. Flow control is by credits.
//
// Keys: large keys are split into partitions (PLAIT_PS_PARTITION bytes at most) spread over
// all servers and balanced by bytes; small keys are placed by hash.
//
// Consistency (per partition, counted in pushes: a worker's clock for a key is how many
// times it pushed it):
//   kBsp  a pull after a worker's t-th push returns the parameters after every worker's t-th
//         push was applied (once, aggregated); with backup workers, after round t was
//         applied, which takes the first workers - backup_workers pushes of it;
//   kAsp  every push is applied as it arrives; a pull returns the latest parameters;
//   kSsp  as kAsp, but a worker at clock c waits in pull until the slowest worker's clock is
//         at least c - staleness.
// A pull's version (PsWork::version) is the largest v such that every worker's first v pushes
// are in the values it returned.
//
// Errors: bad arguments (unknown key, wrong dtype or length, a pull buffer too small, a push
// on a server rank) throw Error(kInvalidUsage) from the call, before anything is sent, so a
// rejected push changes no server state. A server that dies fails every pending operation
// with it (naming the server and the key); a worker that dies makes the rounds that need it
// fail on every waiting worker, naming it. Every operation has a deadline (PLAIT_TIMEOUT).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plait/bootstrap.h"
#include "plait/communicator.h"
#include "plait/error.h"
#include "plait/types.h"

namespace plait::ps {

enum class Consistency : uint8_t { kBsp, kAsp, kSsp };
std::string_view to_string(Consistency c);  // "bsp", "asp", "ssp"

// What the server does with the gradients pushed for a key. In BSP a round's gradients are
// aggregated first: kSum keeps their sum, kMean their mean (the summation service: workers
// run the optimizer themselves), the optimizers step with their mean. In ASP and SSP every
// push is applied alone: kSum adds it to the parameters, kMean adds 1/workers of it, the
// optimizers step with it.
enum class Rule : uint8_t { kSum, kMean, kSgd, kMomentum, kAdam };
std::string_view to_string(Rule r);  // "sum", "mean", "sgd", "momentum", "adam"

// Optimizer hyper-parameters (PyTorch's conventions: momentum buffer v = mu v + g, w -= lr v;
// Adam with bias correction). Optimizers need a floating-point key; f16/bf16 keys keep an
// fp32 master copy on the server.
struct Update {
  Rule rule = Rule::kSum;
  float lr = 0.01f;
  float momentum = 0.9f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

struct KeyOptions {
  Update update;
  // The key's initial values, read from the first worker at registration (other ranks'
  // pointers are ignored); null: zeros. `count` elements of the key's dtype.
  const void* init = nullptr;
};

struct KeySpec {
  uint64_t key = 0;
  size_t count = 0;
  DataType dtype = DataType::kF32;
  KeyOptions options;
};

struct Options {
  int servers = 0;              // 0: PLAIT_PS_SERVERS
  bool servers_first = false;   // servers are the first k ranks (default: the last k)
  Consistency consistency = Consistency::kBsp;
  int staleness = 0;            // kSsp's bound s
  // kBsp with backup workers: a round is applied once workers - backup_workers pushes of it
  // are in (the first ones, per partition); a later push of a round already applied is
  // dropped, or with fold_late added to the round being aggregated (and counted in its mean).
  int backup_workers = 0;
  bool fold_late = false;
  std::string name = "ps";      // store scope
  // PLAIT_* settings for this store's fabric and service, laid over the environment:
  // PLAIT_PS_PARTITION, PLAIT_PS_CHUNK, PLAIT_PS_SLOTS, PLAIT_PS_WINDOW, PLAIT_PS_WAIT,
  // PLAIT_TRANSPORT, PLAIT_TIMEOUT, ...
  std::map<std::string, std::string> settings;
};

// A pull's or push_pull's Work also says which version it returned (after completion).
class PsWork : public Work {
 public:
  virtual uint64_t version() const = 0;
};
using PsWorkPtr = std::shared_ptr<PsWork>;

// Counters of a rank's service, for benchmarks and tests.
struct Stats {
  uint64_t pushes = 0;          // partitions pushed (worker) or applied (server)
  uint64_t pulls = 0;           // partitions pulled (worker) or answered (server)
  uint64_t bytes_pushed = 0;
  uint64_t bytes_pulled = 0;
  uint64_t credit_waits = 0;    // worker: pushes that waited for a ring slot or the window
  uint64_t peak_bytes_on_wire = 0;  // worker: most push bytes written and not landed at once
  uint64_t deferred = 0;        // server: pushes held in the ring for a later round
  double cpu_seconds = 0;       // this process's CPU time so far (user + system)
};

class KVStore {
 public:
  // Collective over the bootstrap's ranks. Needs at least one server and one worker.
  static std::shared_ptr<KVStore> create(const Bootstrap& bootstrap, const Options& options = {});
  virtual ~KVStore() = default;

  virtual bool is_server() const = 0;
  virtual bool is_worker() const = 0;
  virtual int num_servers() const = 0;
  virtual int num_workers() const = 0;
  // 0.. among the workers (or among the servers); -1 on the other role.
  virtual int worker_index() const = 0;
  virtual int server_index() const = 0;
  virtual int rank() const = 0;
  virtual Consistency consistency() const = 0;

  // A key's element count and type as registered; nullopt for a key never registered. The
  // many-key calls below take bare pointers: a binding that holds sized buffers checks them
  // against this first (each pull buffer is written for the key's whole size).
  struct KeyShape {
    size_t count = 0;
    DataType dtype = DataType::kF32;
  };
  virtual std::optional<KeyShape> key_shape(uint64_t key) const = 0;

  // Collective over every rank, workers and servers, with the same specs in the same order.
  // Throws kInvalidUsage for a key registered twice, a zero count, an optimizer on an
  // integer key, or specs that differ between ranks (naming the rank).
  virtual void register_keys(const std::vector<KeySpec>& specs) = 0;
  void register_key(uint64_t key, size_t count, DataType dtype, const KeyOptions& options = {}) {
    register_keys({KeySpec{key, count, dtype, options}});
  }

  // Workers only. `data` (count elements of the key's dtype) must stay unchanged until the
  // Work completes; `out` is written by the servers until then.
  virtual WorkPtr push(uint64_t key, const void* data, size_t count, DataType dtype) = 0;
  virtual PsWorkPtr pull(uint64_t key, void* out, size_t count, DataType dtype) = 0;
  virtual PsWorkPtr push_pull(uint64_t key, const void* data, void* out, size_t count,
                              DataType dtype) = 0;
  // Many keys in one call: one Work for all of them (version: the smallest). Each buffer
  // holds its key's whole registered size (key_shape()); nothing here can check that.
  virtual WorkPtr push(const std::vector<uint64_t>& keys, const std::vector<const void*>& data) = 0;
  virtual PsWorkPtr pull(const std::vector<uint64_t>& keys, const std::vector<void*>& out) = 0;
  virtual PsWorkPtr push_pull(const std::vector<uint64_t>& keys,
                              const std::vector<const void*>& data,
                              const std::vector<void*>& out) = 0;

  // Collective over every rank. Workers: finish their pending operations and tell the
  // servers they are done. Servers: serve until every worker is done (or has failed). After
  // it, only stats() may be called. Throws if an operation failed or a worker failed.
  virtual void finalize() = 0;

  virtual Stats stats() const = 0;
};

}  // namespace plait::ps
