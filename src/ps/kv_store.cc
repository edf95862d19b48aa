// ps::KVStore: roles from the bootstrap, the fabric, registration, and the checks every call
// makes before anything is sent. The work itself is PsServer's and PsWorker's.
#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "core/clock.h"
#include "core/config_overlay.h"
#include "core/log.h"
#include "plait/ps.h"
#include "plait/rdma.h"
#include "ps/key_table.h"
#include "ps/ps_settings.h"
#include "ps/server.h"
#include "ps/service.h"
#include "ps/update_kernels.h"
#include "ps/worker.h"

namespace plait::ps {

std::string_view to_string(Consistency c) {
  switch (c) {
    case Consistency::kBsp: return "bsp";
    case Consistency::kAsp: return "asp";
    case Consistency::kSsp: return "ssp";
  }
  return "?";
}

std::string_view to_string(Rule r) {
  switch (r) {
    case Rule::kSum: return "sum";
    case Rule::kMean: return "mean";
    case Rule::kSgd: return "sgd";
    case Rule::kMomentum: return "momentum";
    case Rule::kAdam: return "adam";
  }
  return "?";
}

namespace {

const char* const kWaitNames[] = {"spin", "block", "hybrid"};

// A digest of registrations, so that ranks that register different keys find out.
uint64_t digest(const std::vector<KeySpec>& specs) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  for (const KeySpec& s : specs) {
    mix(s.key);
    mix(s.count);
    mix(static_cast<uint64_t>(s.dtype));
    mix(static_cast<uint64_t>(s.options.update.rule));
    uint32_t bits[6];
    std::memcpy(&bits[0], &s.options.update.lr, 4);
    std::memcpy(&bits[1], &s.options.update.momentum, 4);
    std::memcpy(&bits[2], &s.options.update.beta1, 4);
    std::memcpy(&bits[3], &s.options.update.beta2, 4);
    std::memcpy(&bits[4], &s.options.update.eps, 4);
    std::memcpy(&bits[5], &s.options.update.weight_decay, 4);
    for (uint32_t b : bits) mix(b);
  }
  return h;
}

class KVStoreImpl final : public KVStore {
 public:
  KVStoreImpl(std::unique_ptr<rdma::Fabric> fabric, Service service, Options options, Config config)
      : fabric_(std::move(fabric)),
        service_(std::move(service)),
        options_(std::move(options)),
        keys_(service_.num_servers(), config.get<PsSettings>().partition_bytes, config.get<PsSettings>().chunk_bytes) {
    const int me = fabric_->rank();
    const int role = service_.role_index[me];
    const bool server = std::find(service_.servers.begin(), service_.servers.end(), me) !=
                        service_.servers.end();
    if (server) server_ = std::make_unique<PsServer>(*fabric_, service_, role);
    else worker_ = std::make_unique<PsWorker>(*fabric_, service_, role, keys_);
    // Every rank gives one descriptor per worker: servers their rings, workers nothing.
    std::vector<rdma::RemoteKey> mine(service_.num_workers());
    if (server_) mine = server_->ring_keys();
    std::vector<std::vector<rdma::RemoteKey>> all = fabric_->exchange(mine);
    if (server_) {
      server_->start();
    } else {
      std::vector<rdma::RemoteKey> rings;
      for (int s : service_.servers) rings.push_back(all[s][role]);
      worker_->start(std::move(rings));
    }
  }

  ~KVStoreImpl() override {
    server_.reset();
    worker_.reset();
  }

  bool is_server() const override { return server_ != nullptr; }
  bool is_worker() const override { return worker_ != nullptr; }
  int num_servers() const override { return service_.num_servers(); }
  int num_workers() const override { return service_.num_workers(); }
  int worker_index() const override { return worker_ ? service_.role_index[rank()] : -1; }
  int server_index() const override { return server_ ? service_.role_index[rank()] : -1; }
  int rank() const override { return fabric_->rank(); }
  Consistency consistency() const override { return service_.consistency; }

  void register_keys(const std::vector<KeySpec>& specs) override {
    const ErrorContext ctx{.rank = rank(), .op = "ps register_keys"};
    check_open("ps register_keys");
    // Checked on a copy first, so that every rank learns of a refusal at the same step
    // instead of some waiting for the others until the timeout.
    std::string refusal;
    try {
      KeyTable trial = keys_;
      for (const KeySpec& s : specs) trial.add(s, rank());
    } catch (const Error& e) {
      refusal = e.message();
    }
    // Per key, the first worker's initial values (a descriptor others can read), then one
    // descriptor carrying this rank's digest of the specs and its verdict.
    const bool first_worker = worker_ && service_.role_index[rank()] == 0;
    std::vector<std::unique_ptr<rdma::MemoryRegion>> init_regions;
    std::vector<rdma::RemoteKey> mine;
    for (const KeySpec& s : specs) {
      rdma::RemoteKey k;
      if (first_worker && s.options.init && refusal.empty()) {
        init_regions.push_back(fabric_->register_memory(const_cast<void*>(s.options.init),
                                                        s.count * dtype_size(s.dtype),
                                                        rdma::kAccessRemoteRead));
        k = init_regions.back()->remote_key();
      }
      mine.push_back(k);
    }
    mine.push_back({.addr = digest(specs), .length = refusal.empty() ? 0u : 1u, .key = specs.size()});
    std::vector<std::vector<rdma::RemoteKey>> all = fabric_->exchange(mine);
    if (!refusal.empty()) throw invalid_usage(refusal, ctx);
    for (int r = 0; r < fabric_->size(); ++r) {
      const rdma::RemoteKey& theirs = all[r].back();
      if (theirs.length != 0)
        throw invalid_usage("rank " + std::to_string(r) + " refused this registration (its own error says why)", ctx);
      if (theirs.addr != mine.back().addr)
        throw invalid_usage("rank " + std::to_string(r) + " registered different keys (key, count, dtype "
                            "or update) in this call; every rank must register the same ones in the same order",
                            ctx);
    }
    std::vector<const KeyInfo*> added;
    for (const KeySpec& s : specs) added.push_back(&keys_.add(s, rank()));
    std::vector<rdma::RemoteKey> init(all[service_.workers[0]].begin(), all[service_.workers[0]].end() - 1);
    if (server_) server_->add_keys(keys_, added, init);
    if (worker_) worker_->add_partitions(keys_.partitions().size());
    // Nobody pushes or pulls before every server holds its shards, and the first worker's
    // initial values stay registered until they have been read.
    fabric_->exchange(rdma::RemoteKey{});
  }

  WorkPtr push(uint64_t key, const void* data, size_t count, DataType dtype) override {
    const KeyInfo& k = checked(key, count, dtype, "ps push");
    if (!data) throw invalid_usage("null data for key " + std::to_string(key), {.rank = rank(), .op = "ps push"});
    return worker_->submit(OpKind::kPush, {&k}, {data}, {nullptr});
  }
  PsWorkPtr pull(uint64_t key, void* out, size_t count, DataType dtype) override {
    const KeyInfo& k = checked(key, count, dtype, "ps pull");
    if (!out) throw invalid_usage("null output for key " + std::to_string(key), {.rank = rank(), .op = "ps pull"});
    return worker_->submit(OpKind::kPull, {&k}, {nullptr}, {out});
  }
  PsWorkPtr push_pull(uint64_t key, const void* data, void* out, size_t count, DataType dtype) override {
    const KeyInfo& k = checked(key, count, dtype, "ps push_pull");
    if (!data || !out)
      throw invalid_usage("null data or output for key " + std::to_string(key), {.rank = rank(), .op = "ps push_pull"});
    return worker_->submit(OpKind::kPushPull, {&k}, {data}, {out});
  }
  WorkPtr push(const std::vector<uint64_t>& keys, const std::vector<const void*>& data) override {
    return worker_call(OpKind::kPush, keys, &data, nullptr, "ps push");
  }
  PsWorkPtr pull(const std::vector<uint64_t>& keys, const std::vector<void*>& out) override {
    return worker_call(OpKind::kPull, keys, nullptr, &out, "ps pull");
  }
  PsWorkPtr push_pull(const std::vector<uint64_t>& keys, const std::vector<const void*>& data,
                      const std::vector<void*>& out) override {
    return worker_call(OpKind::kPushPull, keys, &data, &out, "ps push_pull");
  }

  std::optional<KeyShape> key_shape(uint64_t key) const override {
    const KeyInfo* k = keys_.find(key);
    if (!k) return std::nullopt;
    return KeyShape{.count = k->count, .dtype = k->dtype};
  }

  void finalize() override {
    check_open("ps finalize");
    finalized_ = true;
    if (worker_) worker_->finalize();
    if (server_) server_->wait_for_workers();
  }

  Stats stats() const override {
    Stats s = server_ ? server_->stats() : worker_->stats();
    s.cpu_seconds = process_cpu_seconds();
    return s;
  }

 private:
  void check_open(const char* op) const {
    if (finalized_) throw invalid_usage("the parameter server was finalized", {.rank = rank(), .op = op});
  }

  // The key as registered, or a clear refusal; nothing is sent before this passes.
  const KeyInfo& checked(uint64_t key, size_t count, DataType dtype, const char* op) const {
    const ErrorContext ctx{.rank = rank(), .op = op};
    check_open(op);
    if (!worker_)
      throw invalid_usage(std::string(op) + " on server rank " + std::to_string(rank()) +
                              ": only workers push and pull",
                          ctx);
    const KeyInfo* k = keys_.find(key);
    if (!k) throw invalid_usage("key " + std::to_string(key) + " was never registered", ctx);
    if (dtype != k->dtype)
      throw invalid_usage("key " + std::to_string(key) + " holds " + std::string(to_string(k->dtype)) +
                              ", not " + std::string(to_string(dtype)),
                          ctx);
    if (count != k->count)
      throw invalid_usage("key " + std::to_string(key) + " holds " + std::to_string(k->count) +
                              " elements; the call gave a buffer of " + std::to_string(count),
                          ctx);
    return *k;
  }

  PsWorkPtr worker_call(OpKind kind, const std::vector<uint64_t>& keys,
                        const std::vector<const void*>* data, const std::vector<void*>* out,
                        const char* op) {
    const ErrorContext ctx{.rank = rank(), .op = op};
    if ((data && data->size() != keys.size()) || (out && out->size() != keys.size()))
      throw invalid_usage("keys and buffers differ in number", ctx);
    if (keys.empty()) throw invalid_usage("no keys", ctx);
    std::unordered_set<uint64_t> seen;
    std::vector<const KeyInfo*> infos;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!seen.insert(keys[i]).second)
        throw invalid_usage("key " + std::to_string(keys[i]) + " appears twice in one call", ctx);
      const KeyInfo* k = keys_.find(keys[i]);
      infos.push_back(&checked(keys[i], k ? k->count : 0, k ? k->dtype : DataType::kF32, op));
      if ((data && !(*data)[i]) || (out && !(*out)[i]))
        throw invalid_usage("null buffer for key " + std::to_string(keys[i]), ctx);
    }
    return worker_->submit(kind, infos, data ? *data : std::vector<const void*>(keys.size()),
                           out ? *out : std::vector<void*>(keys.size()));
  }

  std::unique_ptr<rdma::Fabric> fabric_;
  const Service service_;
  const Options options_;
  KeyTable keys_;
  std::unique_ptr<PsServer> server_;
  std::unique_ptr<PsWorker> worker_;
  bool finalized_ = false;
};

}  // namespace

std::shared_ptr<KVStore> KVStore::create(const Bootstrap& bootstrap, const Options& options) {
  const ErrorContext ctx{.rank = bootstrap.rank, .op = "ps create"};
  const Config config = config_with_settings(options.settings, "ps::Options::settings",
                                             "parameter server", ctx);
  const int size = bootstrap.size;
  const int servers = options.servers > 0 ? options.servers : config.get<PsSettings>().servers;
  if (servers >= size)
    throw invalid_usage("a parameter server job needs at least one worker: " + std::to_string(servers) +
                            " servers of " + std::to_string(size) + " ranks",
                        ctx);
  if (options.staleness < 0 || (options.consistency != Consistency::kSsp && options.staleness != 0))
    throw invalid_usage("staleness " + std::to_string(options.staleness) +
                            " (a bound >= 0, and only with Consistency::kSsp)",
                        ctx);
  if (options.backup_workers < 0 || options.backup_workers >= size - servers ||
      (options.backup_workers > 0 && options.consistency != Consistency::kBsp) ||
      (options.fold_late && options.backup_workers == 0))
    throw invalid_usage("backup_workers " + std::to_string(options.backup_workers) +
                            " (0 up to one less than the " + std::to_string(size - servers) +
                            " workers, only with Consistency::kBsp; fold_late needs backup workers)",
                        ctx);
  Service service;
  service.consistency = options.consistency;
  service.staleness = options.staleness;
  service.backup_workers = options.backup_workers;
  service.fold_late = options.fold_late;
  service.slot_bytes = (std::min(config.get<PsSettings>().chunk_bytes, config.get<PsSettings>().partition_bytes) + 63) / 64 * 64;
  service.slots = static_cast<uint32_t>(config.get<PsSettings>().slots);
  service.window_bytes = config.get<PsSettings>().window_bytes;
  service.timeout = config.timeout;
  service.role_index.resize(size);
  for (int r = 0; r < size; ++r) {
    const bool server = options.servers_first ? r < servers : r >= size - servers;
    std::vector<int>& group = server ? service.servers : service.workers;
    service.role_index[r] = static_cast<int>(group.size());
    group.push_back(r);
  }
  // The service's completion threads wait as PLAIT_PS_WAIT says.
  rdma::FabricOptions fabric_options{.name = options.name, .settings = options.settings};
  fabric_options.settings["PLAIT_WAIT"] = kWaitNames[static_cast<int>(config.get<PsSettings>().wait)];
  auto fabric = rdma::Fabric::create(bootstrap, fabric_options);
  return std::make_shared<KVStoreImpl>(std::move(fabric), std::move(service), options, config);
}

}  // namespace plait::ps
