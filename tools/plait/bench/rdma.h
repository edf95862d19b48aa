// `plait bench rdma`: point to point on the transport itself (plait::rdma::Fabric, no
// communicator above it), between ranks 0 and 1, the way UCX's ucx_perftest and the verbs
// perftests measure a fabric:
//
//   send_lat  tagged send/recv ping-pong; one-way time              (ucx_perftest ucp_am_lat)
//   put_lat   one-sided write ping-pong, each side polling its memory for the peer's write;
//             one-way time                                           (ucp_put_lat, ib_write_lat)
//   put_bw    a stream of one-sided writes, --window in flight; time per write and GB/s
//                                                                    (ucp_put_bw, ib_write_bw)
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace plait::cli {

struct RdmaBenchOptions {
  int nranks = 0;  // -n: launch a local job of this many ranks
  std::string test = "send_lat";
  size_t min_bytes = 8;
  size_t max_bytes = size_t{4} << 20;
  double factor = 4.0;
  int iters = 0;    // 0: by size, about 256 MiB moved, 20 to 5000
  int window = 16;  // put_bw: writes in flight
  std::string memory = "fabric";  // fabric: Fabric::allocate_memory; user: registered vectors
  std::string json_path;
  std::vector<std::string> forwarded_args;
  bool help = false;
};

RdmaBenchOptions parse_rdma_bench_args(const std::vector<std::string>& args);
std::string rdma_bench_usage();
// argv after "bench rdma".
int rdma_bench_main(const std::vector<std::string>& args);

}  // namespace plait::cli
