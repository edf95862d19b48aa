// `plait bench compress`: every compressor over a size sweep on one core: compress (with and
// without error feedback), decompress and the round trip in GB/s of f32 input, the exact wire
// size and the compression ratio.
#pragma once

#include <string>
#include <vector>

namespace plait::cli {

// argv after "bench compress".
int compress_bench_main(const std::vector<std::string>& args);
std::string compress_bench_usage();

}  // namespace plait::cli
