#include "plait/bench/rdma.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "core/clock.h"
#include "core/config.h"
#include "plait/bench/options.h"
#include "plait/bench/subcommand.h"
#include "plait/commands.h"
#include "plait/error.h"
#include "plait/option_reader.h"
#include "plait/rdma.h"

namespace plait::cli {
namespace {

using rdma::Completion;
using rdma::CompletionQueue;

constexpr uint64_t kTag = 0x7264;  // "rd"

// One peer of the measurement: its fabric, queue, buffers and the peer's key.
struct Side {
  rdma::Fabric& fabric;
  int peer;
  CompletionQueue& cq;
  char* out;  // what we send or write
  char* in;   // where the peer writes or sends to us
  rdma::RemoteKey peer_key;
  int writes_in_flight = 0;

  // Takes one completion of ours, within the job's timeout.
  void take(const char* what) {
    Completion c;
    if (!cq.wait(&c, fabric.timeout()))
      throw Error(ErrorCategory::kTimeout, std::string("bench rdma: no completion of a ") + what,
                  {.rank = fabric.rank(), .peer = peer});
    if (!c.ok()) throw *c.error;
    if (c.op == rdma::OpType::kWrite) --writes_in_flight;
  }
  // Reaps what completed, without waiting: a write's completion must not hold up the
  // ping-pong (it means "in the peer's memory", after the peer may have seen it).
  void reap() {
    Completion c;
    while (cq.poll(&c)) {
      if (!c.ok()) throw *c.error;
      if (c.op == rdma::OpType::kWrite) --writes_in_flight;
    }
  }
  void send(size_t bytes) {
    fabric.send(peer, out, bytes, kTag, 0, cq, 0);
    take("send");
  }
  void recv(size_t bytes) {
    fabric.recv(peer, in, bytes, kTag, cq, 0);
    take("recv");
  }
  void write(size_t bytes, uint64_t seq) {
    std::memcpy(out + bytes - sizeof seq, &seq, sizeof seq);
    fabric.write(peer, out, bytes, peer_key, 0, std::nullopt, cq, 0);
    ++writes_in_flight;
  }
  // Polls our memory for the peer's write number `seq` (its last 8 bytes), progressing the
  // fabric meanwhile: where the transport emulates writes, our progress applies them.
  void await_write(size_t bytes, uint64_t seq) {
    auto* word = reinterpret_cast<uint64_t*>(in + bytes - sizeof seq);
    // The clock is read only once the write is late: a read per iteration is a visible part
    // of a sub-microsecond ping-pong.
    std::optional<Deadline> deadline;
    for (unsigned spins = 0;; ++spins) {
      if (std::atomic_ref<uint64_t>(*word).load(std::memory_order_acquire) == seq) return;
      reap();
      if (spins % 4096 != 4095) continue;
      if (!deadline) deadline = Deadline::after(fabric.timeout());
      if (deadline->expired())
        throw Error(ErrorCategory::kTimeout,
                    "bench rdma: write #" + std::to_string(seq) + " never arrived",
                    {.rank = fabric.rank(), .peer = peer});
    }
  }
  void drain_writes() {
    while (writes_in_flight > 0) take("write");
  }
};

// One-way seconds (latency tests) or seconds per write (put_bw) of `iters` calls.
double run_test(Side& s, const std::string& test, size_t bytes, int iters, int window,
                uint64_t* seq) {
  const bool first = s.fabric.rank() == 0;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < iters; ++i) {
    if (test == "send_lat") {
      if (first) {
        s.send(bytes);
        s.recv(bytes);
      } else {
        s.recv(bytes);
        s.send(bytes);
      }
    } else if (test == "put_lat") {
      const uint64_t n = ++*seq;
      if (first) {
        s.write(bytes, n);
        s.await_write(bytes, n);
      } else {
        s.await_write(bytes, n);
        s.write(bytes, n);
      }
    } else if (first) {  // put_bw
      while (s.writes_in_flight >= window) s.take("write");
      s.write(bytes, ++*seq);
    }
  }
  if (test == "put_bw") {
    if (first) s.drain_writes();
    // The peer progresses (emulated writes need it) until told that every write is in.
    if (first) s.send(0); else s.recv(0);
  }
  const double seconds = seconds_since(start);
  s.drain_writes();
  return test == "put_bw" ? seconds / iters : seconds / iters / 2;
}

int run(const RdmaBenchOptions& o) {
  const Config config = Config::from_env();
  Bootstrap bootstrap = bootstrap_from_env(config.connect_timeout);
  auto fabric = rdma::Fabric::create(bootstrap, {.name = "bench-rdma"});
  const int me = fabric->rank();
  if (fabric->size() < 2) throw invalid_usage("plait bench rdma needs 2 ranks (-n 2)");
  const std::vector<size_t> sizes = size_sweep(std::max<size_t>(o.min_bytes, 8),
                                               std::max<size_t>(o.max_bytes, 8), o.factor);
  // Both buffers as ucx_perftest has them (memory the transport allocates), or the user's.
  std::vector<char> user_out, user_in;
  std::unique_ptr<rdma::MemoryRegion> out_region, region;
  char *out = nullptr, *in = nullptr;
  if (o.memory == "fabric") {
    out_region = fabric->allocate_memory(sizes.back(), rdma::kAccessLocal);
    region = fabric->allocate_memory(sizes.back(), rdma::kAccessRemoteWrite);
    out = static_cast<char*>(out_region->addr());
    in = static_cast<char*>(region->addr());
  } else {
    user_out.resize(sizes.back());
    user_in.resize(sizes.back());
    out = user_out.data();
    in = user_in.data();
    region = fabric->register_memory(in, sizes.back(), rdma::kAccessRemoteWrite);
  }
  const std::vector<rdma::RemoteKey> keys = fabric->exchange(region->remote_key());
  if (me < 2) {
    const int peer = 1 - me;
    auto cq = fabric->create_cq();
    Side side{*fabric, peer, *cq, out, in, keys[peer]};
    FILE* json = me == 0 && !o.json_path.empty() ? std::fopen(o.json_path.c_str(), "w") : nullptr;
    if (me == 0) {
      std::printf("# plait bench rdma %s: rank 0 and rank 1 over %s, %s memory%s\n",
                  o.test.c_str(), fabric->provider(1).c_str(), o.memory.c_str(),
                  o.test == "put_bw" ? (", " + std::to_string(o.window) + " writes in flight").c_str()
                                     : "");
      std::printf("%12s %8s %12s %10s\n", "size(B)", "iters",
                  o.test == "put_bw" ? "time/op(us)" : "one-way(us)", "GB/s");
    }
    uint64_t seq = 0;
    for (size_t bytes : sizes) {
      const int iters = o.iters > 0 ? o.iters
                                    : static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / bytes,
                                                                          20, 5000));
      run_test(side, o.test, bytes, std::max(2, iters / 10), o.window, &seq);  // warm-up
      const double t = run_test(side, o.test, bytes, iters, o.window, &seq);
      if (me != 0) continue;
      const double gbps = static_cast<double>(bytes) / t / 1e9;
      std::printf("%12zu %8d %12.2f %10.3f\n", bytes, iters, t * 1e6, gbps);
      if (json)
        std::fprintf(json, "{\"test\":\"%s\",\"memory\":\"%s\",\"bytes\":%zu,\"iters\":%d,\"time_us\":%.4f,\"gbps\":%.4f}\n",
                     o.test.c_str(), o.memory.c_str(), bytes, iters, t * 1e6, gbps);
    }
    if (json) std::fclose(json);
    std::fflush(stdout);
  }
  fabric->exchange(rdma::RemoteKey{});  // nobody deregisters while a peer may still write
  return 0;
}

}  // namespace

RdmaBenchOptions parse_rdma_bench_args(const std::vector<std::string>& args) {
  RdmaBenchOptions o;
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
    if (arg == "--test") {
      o.test = in.value();
      if (o.test != "send_lat" && o.test != "put_lat" && o.test != "put_bw")
        throw invalid_usage("--test is send_lat, put_lat or put_bw, not '" + o.test + "'");
    } else if (arg == "--min") {
      o.min_bytes = in.bytes();
    } else if (arg == "--max") {
      o.max_bytes = in.bytes();
    } else if (arg == "--factor") {
      o.factor = in.factor();
    } else if (arg == "--iters") {
      o.iters = in.integer(1);
    } else if (arg == "--window") {
      o.window = in.integer(1);
    } else if (arg == "--memory") {
      o.memory = in.value();
      if (o.memory != "fabric" && o.memory != "user")
        throw invalid_usage("--memory is fabric or user, not '" + o.memory + "'");
    } else if (arg == "--json") {
      o.json_path = in.value();
    } else {
      in.unknown();
    }
    for (std::string& a : in.taken()) o.forwarded_args.push_back(std::move(a));
  }
  if (o.min_bytes > o.max_bytes) throw invalid_usage("--min is larger than --max");
  return o;
}

std::string rdma_bench_usage() {
  return "usage: plait bench [-n N] rdma [--test T] [options]\n"
         "Point to point on the transport (plait::rdma::Fabric) between ranks 0 and 1.\n"
         "  --test T      send_lat (default): tagged send/recv ping-pong, one-way time\n"
         "                put_lat: write ping-pong, each side polls its memory, one-way time\n"
         "                put_bw: a stream of writes, --window in flight, time per write\n"
         "  --min BYTES   smallest size (default 8, at least 8)\n"
         "  --max BYTES   largest size (default 4M)\n"
         "  --factor F    size multiplier between rows (default 4)\n"
         "  --iters N     timed calls per size (default: ~256 MiB moved, 20 to 5000)\n"
         "  --window W    put_bw: writes in flight (default 16)\n"
         "  --memory M    fabric (default): buffers from Fabric::allocate_memory, as\n"
         "                ucx_perftest allocates them; user: the program's own, registered\n"
         "  --json FILE   also write one JSON object per size to FILE\n"
         "PLAIT_TRANSPORT picks the provider (shm, tcp, ucx; PLAIT_UCX_TLS for UCX's).\n";
}

int rdma_bench_main(const std::vector<std::string>& args) {
  return bench_subcommand_main("rdma", args, &parse_rdma_bench_args, &rdma_bench_usage, &run);
}

}  // namespace plait::cli
