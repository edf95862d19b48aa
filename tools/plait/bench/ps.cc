#include "plait/bench/ps.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <thread>

#include "core/clock.h"
#include "core/config.h"
#include "core/reduce.h"
#include "plait/bench/options.h"
#include "plait/bench/subcommand.h"
#include "plait/commands.h"
#include "plait/communicator.h"
#include "plait/option_reader.h"
#include "plait/ps.h"
#include "plait/rdma.h"
#include "ps/ps_settings.h"

namespace plait::cli {
namespace {

double all_reduce(Communicator& comm, double v, ReduceOp op) {
  comm.allreduce(&v, &v, 1, DataType::kF64, op)->wait();
  return v;
}

// Point-to-point bandwidth of one-sided writes of `bytes` from the first worker to the first
// server over a fabric like the service's own: the beta of the cost model.
double measure_beta(const Bootstrap& bootstrap, int worker, int server, size_t bytes) {
  auto fabric = rdma::Fabric::create(bootstrap, {.name = "ps-bench-beta"});
  std::vector<std::byte> buf(bytes);
  auto region = fabric->register_memory(buf.data(), buf.size(), rdma::kAccessRemoteWrite);
  auto keys = fabric->exchange(region->remote_key());
  double beta = 0;
  if (fabric->rank() == worker) {
    auto cq = fabric->create_cq();
    rdma::Completion c;
    double best = 1e30;
    for (int rep = 0; rep < 8; ++rep) {
      const Clock::time_point start = Clock::now();
      fabric->write(server, buf.data(), bytes, keys[server], 0, {}, *cq, 0);
      if (!cq->wait(&c, fabric->timeout()) || !c.ok())
        throw remote_error("ps bench: the bandwidth probe's write failed");
      if (rep > 0) best = std::min(best, seconds_since(start));
    }
    beta = static_cast<double>(bytes) / best;  // bytes per second
  }
  fabric->exchange(rdma::RemoteKey{});  // nobody deregisters while the probe writes
  return beta;
}

// The gamma of the cost model: gradient bytes a server sums per second, as a BSP round sums
// two pushes straight from their ring slots into the accumulator (f32, `bytes` each).
double measure_gamma(size_t bytes) {
  const size_t n = std::max<size_t>(1, bytes / 4);
  std::vector<float> a(n, 1.0f), b(n, 2.0f), acc(n);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const Clock::time_point start = Clock::now();
    reduce_into(DataType::kF32, ReduceOp::kSum, acc.data(), a.data(), b.data(), n);
    if (rep > 0) best = std::min(best, seconds_since(start));
  }
  return 2.0 * static_cast<double>(n * 4) / best;
}

// --check, once every worker's calls (`calls` each, on this key) are through: the last call's
// own result where it is exact (a BSP push_pull: its round's sum), then a pull, which sees
// every push. Returns how many values were wrong (0 on a server).
int check_values(ps::KVStore& kv, uint64_t key, const std::vector<float>& last,
                 const std::vector<float>& pattern, bool push, bool pull, int workers, int calls) {
  const bool bsp = kv.consistency() == ps::Consistency::kBsp;
  const size_t n = last.size();
  auto want = [&](size_t j) {
    if (!push) return pattern[j];
    return static_cast<float>(bsp ? workers : workers * calls) * pattern[j];
  };
  int wrong = 0;
  if (kv.is_worker() && pull && push && bsp)
    for (size_t j = 0; j < n; ++j) wrong += last[j] != want(j);
  if (!kv.is_worker()) return 0;
  // A pull at this worker's clock: under BSP the last round's result. Under ASP and SSP a
  // push is complete once it is in its server's ring, not once it is applied, so a pull
  // returns the latest values, which hold every push only once its version (every worker's
  // first `version` pushes are in) reaches `calls`: pulled again until it does, for at most
  // a minute, after which the values are checked as they are.
  std::vector<float> after(n);
  const Clock::time_point give_up = Clock::now() + std::chrono::minutes(1);
  for (;;) {
    ps::PsWorkPtr work = kv.pull(key, after.data(), n, DataType::kF32);
    work->wait();
    if (!push || bsp || work->version() >= static_cast<uint64_t>(calls) || Clock::now() > give_up)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (size_t j = 0; j < n; ++j) wrong += after[j] != want(j);
  return wrong;
}

int run(const PsBenchOptions& o) {
  const Config config = Config::from_env();
  Bootstrap bootstrap = bootstrap_from_env(config.connect_timeout);
  auto comm = Communicator::create(bootstrap, {.name = "ps-bench"});
  const int size = comm->size(), me = comm->rank();
  if (o.servers >= size)
    throw invalid_usage("--servers " + std::to_string(o.servers) + " leaves no worker among " +
                        std::to_string(size) + " ranks");
  const int W = size - o.servers;
  ps::Options po;
  po.servers = o.servers;
  po.consistency = o.mode == "asp" ? ps::Consistency::kAsp
                   : o.mode == "ssp" ? ps::Consistency::kSsp
                                     : ps::Consistency::kBsp;
  po.staleness = o.staleness;
  auto kv = ps::KVStore::create(bootstrap, po);
  const std::vector<size_t> sizes = size_sweep(o.min_bytes, o.max_bytes, o.factor);
  const bool push = o.op != "pull", pull = o.op != "push";
  // Pushed values, and with --op pull the keys' initial values: small whole numbers, so that
  // every sum is exact in f32 and names where its values landed.
  const size_t largest = std::max<size_t>(1, sizes.back() / 4);
  std::vector<float> pattern(largest);
  for (size_t j = 0; j < largest; ++j) pattern[j] = static_cast<float>(j % 7 + 1);
  std::vector<ps::KeySpec> specs;
  for (size_t i = 0; i < sizes.size(); ++i)
    specs.push_back({.key = i, .count = std::max<size_t>(1, sizes[i] / 4), .dtype = DataType::kF32,
                     .options = {.init = push ? nullptr : pattern.data()}});
  kv->register_keys(specs);
  // Beta: a 16 MiB one-sided write (or the largest size) from worker 0 to server 0.
  const double beta = all_reduce(
      *comm, measure_beta(bootstrap, 0, W, std::min<size_t>(o.max_bytes, size_t{16} << 20)),
      ReduceOp::kMax);
  const double gamma = measure_gamma(std::min<size_t>(o.max_bytes, size_t{8} << 20));
  // Ranks that share one host's cores share its copy engine too: the links of the cost model
  // are then memory copies by those cores, and so is the servers' summing.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const bool shared_cores = bootstrap.local_size == size && cores < size;

  std::unique_ptr<std::FILE, decltype(&std::fclose)> json(nullptr, &std::fclose);
  if (me == 0) {
    if (!o.json_path.empty()) {
      json.reset(std::fopen(o.json_path.c_str(), "w"));
      if (!json) throw system_error("--json: cannot write '" + o.json_path + "'", errno);
    }
    std::printf("# plait bench ps: %s, %d servers, %d workers, %s, f32, partitions <= %zu bytes in "
                "chunks <= %zu, %d slots, window %s, %d call(s) in flight\n",
                o.op.c_str(), o.servers, W, o.mode.c_str(), config.get<ps::PsSettings>().partition_bytes,
                config.get<ps::PsSettings>().chunk_bytes, config.get<ps::PsSettings>().slots,
                config.get<ps::PsSettings>().window_bytes ? std::to_string(config.get<ps::PsSettings>().window_bytes).c_str() : "none",
                o.depth);
    std::printf("# beta (one-sided write, worker 0 -> server 0): %.2f GB/s; links: ideal = max(n/beta, "
                "w*n/(k*beta)) per direction%s\n",
                beta / 1e9, o.op == "push_pull" ? ", both directions at once" : "");
    if (shared_cores)
      std::printf("# %d ranks share %d cores: cores: ideal = (copies/beta + summed/gamma) / %d, every "
                  "pushed and pulled byte copied once and every pushed byte summed once "
                  "(gamma %.2f GB/s); the larger ideal is the bound\n",
                  size, cores, cores, gamma / 1e9);
    if (o.check)
      std::printf("# check: %s\n",
                  !push ? "every pull returns the initial values, v[j] = j % 7 + 1"
                  : po.consistency == ps::Consistency::kBsp
                      ? "every round's sum, v[j] = workers x (j % 7 + 1), in the last call and in a pull after it"
                      : "a pull whose version says every worker's last push is in: every push added, v[j] = workers x calls x (j % 7 + 1)");
    std::printf("# %12s %6s %11s %11s %11s %11s %10s %11s %7s %6s%s\n", "bytes", "iters", "time(us)",
                "worker GB/s", "total GB/s", "CPU s/GB", "srv busy", "ideal(us)", "ideal%", "bound",
                o.check ? "  check" : "");
    std::fflush(stdout);
  }
  int wrong_total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const size_t count = specs[i].count, bytes = count * 4;
    // --depth calls in flight, each pulling into its own buffer (a training loop that pushes
    // the next step's gradients while the last step's parameters still come back).
    const size_t mine_count = kv->is_worker() ? count : 0;
    std::vector<float> data(pattern.begin(), pattern.begin() + static_cast<std::ptrdiff_t>(mine_count));
    std::vector<std::vector<float>> outs(static_cast<size_t>(o.depth), std::vector<float>(mine_count));
    std::vector<float>& out = outs[0];
    std::deque<WorkPtr> in_flight;
    uint64_t issued = 0;
    auto issue = [&] {
      float* dst = outs[issued++ % outs.size()].data();
      if (push && pull) in_flight.push_back(kv->push_pull(i, data.data(), dst, count, DataType::kF32));
      else if (pull) in_flight.push_back(kv->pull(i, dst, count, DataType::kF32));
      else in_flight.push_back(kv->push(i, data.data(), count, DataType::kF32));
      if (in_flight.size() >= static_cast<size_t>(o.depth)) {
        in_flight.front()->wait();
        in_flight.pop_front();
      }
    };
    auto drain = [&] {
      for (auto& w : in_flight) w->wait();
      in_flight.clear();
    };
    auto call = [&] {
      issue();
      if (o.depth == 1) drain();
    };
    int iters = o.iters;
    const int warmup_calls = std::max(1, o.warmup);
    double estimate = 0;
    if (kv->is_worker()) {
      const Clock::time_point start = Clock::now();
      for (int k = 0; k < warmup_calls; ++k) call();
      drain();
      estimate = seconds_since(start) / warmup_calls;
    }
    if (iters == 0) iters = calibrated_iters(all_reduce(*comm, estimate, ReduceOp::kMax));
    comm->barrier()->wait();
    const double cpu0 = process_cpu_seconds();
    const Clock::time_point start = Clock::now();
    if (kv->is_worker()) {
      for (int k = 0; k < iters; ++k) call();
      drain();
      // With several calls in flight, check the last one's buffer.
      out = outs[(issued - 1) % outs.size()];
    }
    const double mine = kv->is_worker() ? seconds_since(start) / iters : 0;
    comm->barrier()->wait();  // servers' CPU counts until every worker is through
    const double my_cpu = process_cpu_seconds() - cpu0;
    const double cpu = all_reduce(*comm, my_cpu, ReduceOp::kSum);
    // How busy a server process was: its CPU time (aggregation, updates, transport) over the
    // timed loop's wall time, the mean over the servers.
    const double server_cpu = all_reduce(*comm, kv->is_server() ? my_cpu : 0.0, ReduceOp::kSum);
    const double t = all_reduce(*comm, mine, ReduceOp::kMax);
    int wrong = 0;
    if (o.check) wrong = check_values(*kv, i, out, pattern, push, pull, W, warmup_calls + iters);
    wrong_total += static_cast<int>(all_reduce(*comm, wrong, ReduceOp::kSum));
    if (me == 0) {
      const double moved = static_cast<double>(bytes) * ((push ? 1 : 0) + (pull ? 1 : 0));
      const double per_worker = moved / t / 1e9;
      const double direction = static_cast<double>(bytes) / beta;
      const double links = std::max(direction, W * direction / o.servers);
      const double summed = push && po.consistency == ps::Consistency::kBsp ? W * static_cast<double>(bytes) : 0;
      const double on_cores = shared_cores ? (W * moved / beta + summed / gamma) / cores : 0;
      const double ideal = std::max(links, on_cores);
      const double cpu_per_gb = cpu / (moved * W * iters / 1e9);
      const double server_busy = server_cpu / (o.servers * t * iters);
      std::printf("  %12zu %6d %11.1f %11.3f %11.3f %11.3f %9.0f%% %11.1f %6.0f%% %6s%s\n", bytes,
                  iters, t * 1e6, per_worker, per_worker * W, cpu_per_gb, 100 * server_busy,
                  ideal * 1e6, 100 * ideal / t, on_cores > links ? "cores" : "links",
                  o.check ? (wrong ? "  WRONG" : "  ok") : "");
      std::fflush(stdout);
      if (json)
        std::fprintf(json.get(),
                     "{\"op\":\"ps_%s\",\"mode\":\"%s\",\"servers\":%d,\"workers\":%d,\"bytes\":%zu,"
                     "\"iters\":%d,\"time_us\":%.3f,\"worker_gbps\":%.4f,\"total_gbps\":%.4f,"
                     "\"cpu_s_per_gb\":%.4f,\"server_busy\":%.4f,\"ideal_us\":%.3f,"
                     "\"beta_gbps\":%.4f,\"gamma_gbps\":%.4f,\"links_us\":%.3f,\"cores_us\":%.3f}\n",
                     o.op.c_str(), o.mode.c_str(), o.servers, W, bytes, iters, t * 1e6, per_worker,
                     per_worker * W, cpu_per_gb, server_busy, ideal * 1e6, beta / 1e9, gamma / 1e9,
                     links * 1e6, on_cores * 1e6);
    }
  }
  kv->finalize();
  return wrong_total > 0 ? 1 : 0;
}

}  // namespace

PsBenchOptions parse_ps_bench_args(const std::vector<std::string>& args) {
  PsBenchOptions o;
  OptionReader in(args);
  while (in.next()) {
    const std::string& arg = in.name();
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      continue;
    }
    if (arg == "-n") {
      o.nranks = in.integer(2);
      continue;  // not forwarded: the ranks run the bench themselves
    }
    if (arg == "--servers") o.servers = in.integer(1);
    else if (arg == "--op") o.op = in.value();
    else if (arg == "--mode") o.mode = in.value();
    else if (arg == "--staleness") o.staleness = in.integer(0);
    else if (arg == "--min") o.min_bytes = in.bytes();
    else if (arg == "--max") o.max_bytes = in.bytes();
    else if (arg == "--factor") o.factor = in.factor();
    else if (arg == "--iters") o.iters = in.integer(1);
    else if (arg == "--warmup") o.warmup = in.integer(0);
    else if (arg == "--depth") o.depth = in.integer(1);
    else if (arg == "--check") o.check = true;
    else if (arg == "--json") o.json_path = in.value();
    else in.unknown();
    for (std::string& a : in.taken()) o.forwarded_args.push_back(std::move(a));
  }
  if (o.op != "push" && o.op != "pull" && o.op != "push_pull")
    throw invalid_usage("--op takes push, pull or push_pull, not '" + o.op + "'");
  if (o.mode != "bsp" && o.mode != "asp" && o.mode != "ssp")
    throw invalid_usage("--mode takes bsp, asp or ssp, not '" + o.mode + "'");
  if (o.staleness > 0 && o.mode != "ssp") throw invalid_usage("--staleness needs --mode ssp");
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes)
    throw invalid_usage("--min must be at least 4 bytes and --max at least --min");
  return o;
}

std::string ps_bench_usage() {
  return "usage: plait bench [-n N] ps [options]\n"
         "  the parameter server (ps::KVStore) over a size sweep: the last k ranks serve,\n"
         "  the others push and pull one f32 key per size\n"
         "  --servers k        servers (default 1)\n"
         "  --op OP            push | pull | push_pull (default push_pull)\n"
         "  --mode M           bsp | asp | ssp (default bsp); --staleness s with ssp\n"
         "  --min B --max B    sizes in bytes (default 4K .. 16M), K/M/G suffixes\n"
         "  --factor F         size step (default 4)\n"
         "  --iters N          timed calls per size (default: calibrated, ~0.2 s)\n"
         "  --warmup N         untimed calls first (default 3)\n"
         "  --depth D          calls in flight (default 1: each call waited for before the next)\n"
         "  --check            check the values pulled\n"
         "  --json PATH        one JSON object per size\n"
         "  PLAIT_PS_PARTITION, PLAIT_PS_CHUNK, PLAIT_PS_SLOTS, PLAIT_PS_WINDOW, PLAIT_PS_WAIT,\n"
         "  PLAIT_TRANSPORT apply\n";
}

int ps_bench_main(const std::vector<std::string>& args) {
  return bench_subcommand_main("ps", args, &parse_ps_bench_args, &ps_bench_usage, &run);
}

}  // namespace plait::cli
