// `plait bench moe`: expert-parallel dispatch and combine (plait/moe.h) at one shape: time per
// call (the slowest rank's, min / median / max over iterations), the GB/s of the rows each
// rank receives from others, and the balance of the routing (max/mean rows received per
// rank). --skew zipf:S draws experts from a Zipf law (expert e with weight 1/(e+1)^S), as
// real gates skew towards hot experts; --check verifies that every token arrives once at each
// of its experts' ranks and that combine brings it back to its place.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace plait::cli {

struct MoeBenchOptions {
  int nranks = 0;  // -n: launch a local job of this many ranks
  size_t tokens = 4096;
  size_t hidden = 1024;
  int experts = 16;
  int topk = 2;
  std::string dtype = "bf16";
  std::string skew = "uniform";  // uniform | zipf:S
  double zipf_s = 0;
  std::string path = "all";      // all | auto | alltoallv | one-sided
  int iters = 0;                 // 0: about 1 s of calls, 5 to 200
  int warmup = 3;
  bool check = false;
  std::string json_path;
  std::vector<std::string> forwarded_args;
  bool help = false;
};

MoeBenchOptions parse_moe_bench_args(const std::vector<std::string>& args);
std::string moe_bench_usage();
// argv after "bench moe".
int moe_bench_main(const std::vector<std::string>& args);

}  // namespace plait::cli
