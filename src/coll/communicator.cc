// Communicator creation, the shared call path (selection, logging, enqueue), point-to-point,
// split and abort. The per-collective argument handling lives in collectives.cc.
#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <iterator>
#include <string_view>
#include <thread>

#include "coll/communicator_impl.h"
#include "coll/cost_agreement.h"
#include "coll/schedule/tags.h"
#include "coll/segment/segment_setup.h"
#include "core/config_overlay.h"
#include "core/log.h"
#include "transport/job_fabric.h"

namespace plait {

std::shared_ptr<Communicator> Communicator::create(const Bootstrap& bootstrap,
                                                   const CommunicatorOptions& options) {
  transport::check_bootstrap(bootstrap);
  set_log_rank(bootstrap.rank);
  Config config =
      config_with_settings(options.settings, "CommunicatorOptions::settings", "communicator",
                           {.rank = bootstrap.rank, .op = "create communicator"});
  auto timeout = options.timeout.count() > 0 ? options.timeout : config.timeout;

  transport::JobFabric job = transport::create_job_fabric(bootstrap, options.name, config);
  std::shared_ptr<transport::Fabric> fabric = std::move(job.fabric);
  auto topology = std::move(job.topology);
  auto store = std::move(job.store);
  std::vector<int> ranks(bootstrap.size);
  for (int r = 0; r < bootstrap.size; ++r) ranks[r] = r;
  return std::make_shared<coll::CommunicatorImpl>(std::move(fabric), std::move(topology),
                                                  /*comm_id=*/1, bootstrap.rank, std::move(ranks),
                                                  store, config, timeout);
}

namespace coll {

CommunicatorImpl::CommunicatorImpl(std::shared_ptr<transport::Fabric> fabric,
                                   std::shared_ptr<const transport::FabricTopology> topology,
                                   uint32_t comm_id, int rank, std::vector<int> fabric_rank,
                                   std::shared_ptr<Store> store, Config config,
                                   std::chrono::milliseconds timeout)
    : topology_(std::move(topology)),
      comm_id_(comm_id),
      store_(std::move(store)),
      config_(std::move(config)),
      timeout_(timeout) {
  // Hosts of this communicator's members, numbered 0.. in order of first appearance; left
  // empty when they all share one host (nothing hierarchical to exploit).
  std::vector<int> hosts;
  for (int f : fabric_rank) hosts.push_back(topology_->host_of.empty() ? 0 : topology_->host_of[f]);
  std::vector<int> renumbered(hosts.size());
  std::map<int, int> index;
  for (size_t r = 0; r < hosts.size(); ++r)
    renumbered[r] = index.emplace(hosts[r], static_cast<int>(index.size())).first->second;
  if (index.size() > 1) host_of_ = std::move(renumbered);
  cost_ = CostParams{.alpha_us = topology_->intra.alpha_us,
                     .beta_bytes_per_us = topology_->intra.beta_bytes_per_us,
                     .gamma_bytes_per_us = topology_->intra.gamma_bytes_per_us,
                     .copy_bytes_per_us = topology_->intra.copy_bytes_per_us,
                     .flag_us = topology_->intra.flag_us};
  if (!host_of_.empty()) {
    cost_.inter_alpha_us = topology_->inter.alpha_us;
    cost_.inter_beta_bytes_per_us = topology_->inter.beta_bytes_per_us;
    cost_.host_contention = topology_->inter.host_contention;
    cost_.ring_contention = topology_->inter.ring_contention;
    // A member alone on its host costs in-host transfers with its own TCP link: all take
    // member 0's parameters, so that all choose alike (cost_agreement.h).
    if (store_)
      cost_ = agree_on_cost_params(cost_, rank, *store_, "cost_params/" + std::to_string(comm_id),
                                   config_.connect_timeout);
  }
  // Ranks of the whole job on this machine against its cores (simulated hosts share them).
  int local_ranks = 0;
  const int me = fabric_rank[rank];
  for (int m : topology_->machine_of) local_ranks += m == topology_->machine_of[me] ? 1 : 0;
  const bool oversubscribed =
      local_ranks > static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Members on one host share a segment for collectives without messages (on several
  // hosts, each host's members share one), unless the user wants messages only
  // (PLAIT_SHM_COLL=off, or every peer over tcp: a test of that path).
  segment::SegmentPlan seg;
  const int members = static_cast<int>(fabric_rank.size());
  if (members >= 2 && config_.shm_coll != "off" && config_.transport != "tcp") {
    // Rounds of 64 KiB keep a round's data in cache and overlap one rank's copy with
    // another's reduction. With more ranks than cores every round also waits for a rank to
    // get a core (a scheduling turn, not a flag's 0.3 us): 1 MiB rounds take 16x fewer.
    // Every rank computes the same value (same host, same job), as the geometry requires.
    const size_t slot = config_.shm_coll_slot     ? config_.shm_coll_slot
                        : oversubscribed ? size_t{1} << 20
                                         : size_t{64} << 10;
    seg = segment::attach_segments(rank, members, host_of_, *store_,
                                   "collective_segment/" + std::to_string(comm_id), slot,
                                   Deadline::after(config_.connect_timeout));
    if (seg.segment && host_of_.empty()) segment_slot_bytes_ = seg.segment->slot_bytes();
    host_segments_ = seg.host_segments;
  }
  engine_ = std::make_shared<CommEngine>(std::move(fabric), comm_id, rank, std::move(fabric_rank),
                                         config_.wait_policy, config_.spin_time, oversubscribed,
                                         timeout_, std::move(seg.segment), std::move(seg.members));
  const auto warn = effective_stall_warn(config_, timeout_);
  if (warn.count() > 0 && store_ && members >= 2) {
    // plait run's on-demand requests are job-wide: the world communicator answers them.
    std::shared_ptr<Store> job_store;
    std::string request_file;
    if (auto* prefixed = dynamic_cast<PrefixStore*>(store_.get()); prefixed && comm_id == 1) {
      job_store = prefixed->base();
      request_file = config_.stall_requests;
    }
    std::weak_ptr<CommEngine> engine = engine_;
    stall_watch_ = watch_for_stalls({.store = store_,
                                     .job_store = std::move(job_store),
                                     .request_file = std::move(request_file),
                                     .comm_id = comm_id,
                                     .rank = rank,
                                     .size = members,
                                     .activity = engine_->activity(),
                                     .inquire =
                                         [engine](uint64_t round, int64_t request) {
                                           if (auto e = engine.lock()) e->send_stall_inquiry(round, request);
                                         },
                                     .warn = warn});
  }
}

void CommunicatorImpl::check_root(int root, const char* op) const {
  if (root < 0 || root >= size())
    throw invalid_usage("root " + std::to_string(root) + " out of range for " +
                            std::to_string(size()) + " ranks",
                        {.rank = rank(), .op = op});
}

void CommunicatorImpl::throw_too_large(size_t count, size_t times, DataType dtype,
                                       const char* op) const {
  throw invalid_usage("count " + std::to_string(count) +
                          (times == 1 ? "" : " x " + std::to_string(times)) + " elements of " +
                          std::string(to_string(dtype)) + " do not fit in memory (byte size overflows)",
                      {.rank = rank(), .op = op});
}

size_t CommunicatorImpl::checked_sum(const std::vector<size_t>& counts, DataType dtype,
                                     const char* op) const {
  size_t total = 0;
  for (size_t c : counts)
    if (__builtin_add_overflow(total, c, &total))
      throw invalid_usage("the counts add up beyond what fits in memory (sum overflows)",
                          {.rank = rank(), .op = op});
  return checked_elems(total, 1, dtype, op);
}

void CommunicatorImpl::throw_unknown(const char* op, const char* what, unsigned value) const {
  throw invalid_usage("unknown " + std::string(what) + " " + std::to_string(value) +
                          " (not a value of plait::" +
                          (std::string(what) == "dtype" ? "DataType" : "ReduceOp") + ")",
                      {.rank = rank(), .op = op});
}

void CommunicatorImpl::throw_null_buffer(size_t elems, const char* what, const char* op) const {
  throw invalid_usage(std::string(what) + " buffer is null but holds " + std::to_string(elems) +
                          " elements",
                      {.rank = rank(), .op = op});
}

CommunicatorImpl::Call CommunicatorImpl::begin_call(CollOp op, DataType dtype, ReduceOp redop,
                                                    int root, size_t count) {
  // The engine's last finished call, filled in afresh: its vectors keep their capacity, so
  // a loop of calls allocates nothing here.
  // The dtype was checked with the count (checked_elems).
  if (op_reduces(op) && static_cast<unsigned>(redop) > static_cast<unsigned>(ReduceOp::kAvg))
      [[unlikely]]
    throw_unknown(std::string(to_string(op)).c_str(), "reduce op", static_cast<unsigned>(redop));
  std::unique_ptr<CollectiveCall> call = engine_->new_call();
  CollArgs& args = call->args;
  args.op = op;
  args.rank = rank();
  args.size = size();
  args.dtype = dtype;
  // The user's op, kAvg included: it travels in the signature, so a rank in an AVG and one
  // in a SUM disagree visibly. Reductions combine kAvg as kSum; finish_collective divides.
  args.redop = redop;
  args.root = root;
  args.count = count;
  args.counts.clear();
  args.displs.clear();
  args.send_counts.clear();
  args.send_displs.clear();
  args.in_place = false;
  args.chunk_count = 0;
  args.ps_roots = config_.ps_roots;
  if (!host_of_.empty() || !args.host_of.empty()) args.host_of = host_of_;  // one host: none
  args.segment_slot_bytes = segment_slot_bytes_;
  args.host_segments = host_segments_;
  args.intra_on_segment = false;  // the selection's to say (enqueue)
  return Call{std::move(call), args};
}

// Work::algorithm() hands out a reference: one string per algorithm, made once.
static const std::string& algorithm_name(Algorithm a) {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (int i = 0; i < 256; ++i) {
      std::string_view name = to_string(static_cast<Algorithm>(i));
      if (name == "?") break;
      v.emplace_back(name);
    }
    return v;
  }();
  return names.at(static_cast<size_t>(a));
}

// The cost model ranks every algorithm and explains its choice in text; that costs more than
// a small collective over shared memory, so each plain shape (no per-rank counts) is
// decided once. mu_ held; the result stays valid until the next call.
const Selection& CommunicatorImpl::select(const CollArgs& args, const std::string& choice) {
  if (!args.counts.empty() || !args.send_counts.empty()) {
    v_selection_ = select_algorithm(args, choice, config_, cost_);
    return v_selection_;
  }
  // A loop calls the same shape again and again: the previous answer first, without
  // building a key.
  const SelectionKey& last = last_selection_key_;
  if (last_selection_ && std::get<0>(last) == static_cast<int>(args.op) &&
      std::get<1>(last) == static_cast<int>(args.dtype) &&
      std::get<2>(last) == static_cast<int>(args.redop) && std::get<3>(last) == args.root &&
      std::get<4>(last) == args.count && std::get<5>(last) == args.in_place &&
      std::get<6>(last) == choice)
    return *last_selection_;
  SelectionKey key{static_cast<int>(args.op), static_cast<int>(args.dtype),
                   static_cast<int>(args.redop), args.root, args.count, args.in_place, choice};
  auto it = selections_.find(key);
  if (it == selections_.end()) {
    if (selections_.size() >= 1024) selections_.clear();
    it = selections_
             .emplace(key, std::make_shared<const Selection>(
                               select_algorithm(args, choice, config_, cost_)))
             .first;
  }
  last_selection_key_ = std::move(key);
  last_selection_ = it->second;
  return *last_selection_;
}

WorkPtr CommunicatorImpl::enqueue(Call&& c, const CallOptions& opts) {
  const size_t elem = dtype_size(c.args.dtype);
  const size_t chunk_bytes = config_.chunk_bytes ? config_.chunk_bytes : 1 << 20;
  // Element sizes are powers of two: a shift, where a division would cost tens of cycles.
  c.args.chunk_count = std::max<size_t>(1, chunk_bytes >> std::countr_zero(elem));

  std::unique_ptr<CollectiveCall> call = std::move(c.call);
  call->timeout = timeout_for(opts);
  // Stand-ins for buffers this rank need not supply (non-roots' reduce output, ...).
  size_t temp_bytes = 0;
  if (c.input == nullptr) temp_bytes += c.input_elems * elem;
  if (c.output == nullptr) temp_bytes += c.output_elems * elem;
  if (temp_bytes > 0) call->temp.reset(new char[temp_bytes]);  // recycled calls have none
  char* temp = call->temp.get();
  static char kEmpty[8];  // a valid address for zero-length slices; never written
  auto stand_in = [&](size_t elems) -> char* {
    if (elems == 0) return kEmpty;
    char* p = temp;
    temp += elems * elem;
    return p;
  };
  call->input = c.input ? const_cast<void*>(c.input) : stand_in(c.input_elems);
  call->output = c.output ? c.output : stand_in(c.output_elems);
  call->avg_data = c.avg_data;
  call->avg_count = c.avg_count;

  // Held through submit(): sequence numbers follow issue order.
  std::lock_guard lock(mu_);
  // "auto" compares as the empty choice: the string compare of every call is then a size
  // check (a memcmp of constant length is inlined; std::string's == calls the library's).
  static const std::string kAuto;
  const std::string& choice = opts.algorithm;
  const bool is_auto = choice.size() == 4 && std::memcmp(choice.data(), "auto", 4) == 0;
  const Selection& selection = select(call->args, is_auto ? kAuto : choice);
  call->algorithm = selection.info;
  call->args.intra_on_segment = selection.intra_on_segment;
  call->seq = seq_++;
  size_t total = call->args.count * elem;
  call->work = std::allocate_shared<WorkImpl>(CachingAllocator<WorkImpl>(),
      WorkLabel{.op = to_string(call->args.op), .seq = static_cast<int64_t>(call->seq), .bytes = total},
      wait_limit(call->timeout),
      rank(),
      &algorithm_name(selection.info->algorithm), opts.timed);
  // One look at the level for both lines: the call's arguments are not even formed below it.
  const bool info = log_enabled(LogLevel::kInfo);
  if (info && logged_.size() < 4096 &&
      logged_
          .insert({static_cast<int>(call->args.op), static_cast<int>(call->args.dtype),
                   call->args.count, static_cast<int>(selection.info->algorithm)})
          .second) {
    log(LogLevel::kInfo, to_string(call->args.op), " #", call->seq, " (count ", call->args.count, ", ",
        to_string(call->args.dtype), ", ", size(), " ranks): ", to_string(selection.info->algorithm),
        ", ", selection.reason);
  }
  if (info && log_enabled(LogLevel::kDebug))
    log(LogLevel::kDebug, to_string(call->args.op), " #", call->seq, ": ", to_string(selection.info->algorithm));
  call->work->set_driver(engine_);
  WorkPtr work = call->work;
  engine_->submit(std::move(call));
  return work;
}

WorkPtr CommunicatorImpl::send(const void* buf, size_t count, DataType dtype, int peer,
                               uint32_t tag, const CallOptions& opts) {
  if (peer < 0 || peer >= size())
    throw invalid_usage("peer " + std::to_string(peer) + " out of range", {.rank = rank(), .op = "send"});
  if (tag >= (1u << 31)) throw invalid_usage("tag must be below 2^31", {.rank = rank(), .op = "send"});
  check_buffer(buf, checked_elems(count, 1, dtype, "send"), "send", "send");
  auto call = std::make_unique<PointToPointCall>();
  call->is_send = true;
  call->buffer = const_cast<void*>(buf);
  call->bytes = count * dtype_size(dtype);
  call->peer = peer;
  call->tag = tag;
  call->timeout = timeout_for(opts);
  call->work = std::allocate_shared<WorkImpl>(CachingAllocator<WorkImpl>(),
      WorkLabel{.op = "send", .bytes = call->bytes, .peer = peer, .tag = tag},
      wait_limit(call->timeout),
      rank(), nullptr, opts.timed);
  call->work->set_driver(engine_);
  WorkPtr work = call->work;
  engine_->submit(std::move(call));
  return work;
}

WorkPtr CommunicatorImpl::recv(void* buf, size_t count, DataType dtype, int peer, uint32_t tag,
                               const CallOptions& opts) {
  if (peer != kAnySource && (peer < 0 || peer >= size()))
    throw invalid_usage("peer " + std::to_string(peer) + " out of range", {.rank = rank(), .op = "recv"});
  if (tag >= (1u << 31)) throw invalid_usage("tag must be below 2^31", {.rank = rank(), .op = "recv"});
  check_buffer(buf, checked_elems(count, 1, dtype, "recv"), "recv", "recv");
  auto call = std::make_unique<PointToPointCall>();
  call->is_send = false;
  call->buffer = buf;
  call->bytes = count * dtype_size(dtype);
  call->peer = peer;
  call->tag = tag;
  call->timeout = timeout_for(opts);
  call->work = std::allocate_shared<WorkImpl>(CachingAllocator<WorkImpl>(),
      WorkLabel{.op = "recv", .bytes = call->bytes, .peer = peer, .tag = tag},
      wait_limit(call->timeout),
      rank(), nullptr, opts.timed);
  call->work->set_driver(engine_);
  WorkPtr work = call->work;
  engine_->submit(std::move(call));
  return work;
}

std::shared_ptr<Communicator> CommunicatorImpl::split(int color, int key) {
  const int n = size();
  // Round 1: everyone's (color, key).
  std::vector<int64_t> mine = {color, key}, all(2 * n);
  allgather(mine.data(), all.data(), 2, DataType::kI64, {})->wait();
  std::vector<int> members;
  for (int r = 0; r < n; ++r)
    if (all[2 * r] == color && color != kUndefinedColor) members.push_back(r);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
  // Round 2: each group's first member draws a fresh communicator id from the store (ids
  // must be unique per fabric, and the new group shares this one).
  int64_t id = 0;
  if (!members.empty() && members.front() == rank()) id = draw_comm_id();
  std::vector<int64_t> ids(n);
  allgather(&id, ids.data(), 1, DataType::kI64, {})->wait();
  if (color == kUndefinedColor) return nullptr;
  // Every member learns the draw's outcome, so all of them fail alike.
  if (ids[members.front()] < 0)
    throw comm_ids_exhausted("split");
  const int new_rank = static_cast<int>(
      std::find(members.begin(), members.end(), rank()) - members.begin());
  std::vector<int> fabric_ranks;
  for (int m : members) fabric_ranks.push_back(engine_->fabric_rank(m));
  return std::make_shared<CommunicatorImpl>(engine_->fabric(), topology_,
                                            static_cast<uint32_t>(ids[members.front()]),
                                            new_rank, std::move(fabric_ranks), store_, config_,
                                            timeout_);
}

std::shared_ptr<Communicator> CommunicatorImpl::subgroup(const std::vector<int>& ranks) {
  const ErrorContext ctx{.rank = rank(), .op = "subgroup"};
  std::vector<bool> seen(size());
  for (int r : ranks) {
    if (r < 0 || r >= size())
      throw invalid_usage("member " + std::to_string(r) + " out of range for " +
                              std::to_string(size()) + " ranks", ctx);
    if (seen[r]) throw invalid_usage("member " + std::to_string(r) + " listed twice", ctx);
    seen[r] = true;
  }
  auto me = std::find(ranks.begin(), ranks.end(), rank());
  if (me == ranks.end())
    throw invalid_usage("only members create a subgroup; rank " + std::to_string(rank()) +
                            " is not in the list",
                        ctx);
  int nth;
  {
    std::lock_guard lock(subgroup_mu_);
    nth = subgroups_made_[ranks]++;
  }
  // The first member draws a communicator id (unique per fabric, as in split) and publishes
  // it under a key every member derives alike.
  std::string key = "subgroup/" + std::to_string(comm_id_) + "/";
  for (int r : ranks) key += std::to_string(r) + ",";
  key += "/" + std::to_string(nth);
  int64_t id;
  if (ranks.front() == rank()) {
    id = draw_comm_id();
    store_->set(key, std::to_string(id));
  } else {
    std::string text;
    try {
      text = store_->get_string(key, timeout_);
    } catch (const Error& e) {
      throw e.with_context(ctx);
    }
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
    if (ec != std::errc() || end != text.data() + text.size())
      throw invalid_usage("the store holds '" + text + "' for subgroup key '" + key +
                              "', not a communicator id (another job shares this store?)",
                          ctx);
  }
  if (id < 0) throw comm_ids_exhausted("subgroup");
  std::vector<int> fabric_ranks;
  for (int m : ranks) fabric_ranks.push_back(engine_->fabric_rank(m));
  return std::make_shared<CommunicatorImpl>(engine_->fabric(), topology_,
                                            static_cast<uint32_t>(id),
                                            static_cast<int>(me - ranks.begin()),
                                            std::move(fabric_ranks), store_, config_, timeout_);
}

// Ids are unique per fabric (every communicator split from one shares its connections, and
// tags carry kCommIdBits of the id): drawn from a counter in the store, never reused. A draw
// past the last id yields -1, which the members then turn into an error.
int64_t CommunicatorImpl::draw_comm_id() {
  const int64_t id = store_->add("comm_ids", 1) + 1;
  return id < (int64_t{1} << kCommIdBits) ? id : -1;
}

Error CommunicatorImpl::comm_ids_exhausted(const char* op) const {
  return invalid_usage("no communicator id left: this job has created " +
                           std::to_string((int64_t{1} << kCommIdBits) - 2) +
                           " communicators by split or subgroup over one fabric (ids are not "
                           "reused); create a new world communicator",
                       {.rank = rank(), .op = op});
}

void CommunicatorImpl::abort(const std::string& reason) {
  engine_->abort("rank " + std::to_string(rank()) + " called abort: " + reason);
}

}  // namespace coll
}  // namespace plait
