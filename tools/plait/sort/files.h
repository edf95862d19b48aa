// Where `plait sort` keeps records: DIR/input-RRRRR (gen), DIR/part-RRRRR (run's output, one
// per rank, in key order across ranks).
#pragma once

#include <string>
#include <vector>

namespace plait::cli {

std::string rank_file(const std::string& dir, const char* stem, int rank);

// DIR's files named STEM-*, in name order; with no stem, part-* if there are any, else
// input-*. Throws plait::Error naming DIR when there are none or it cannot be listed.
std::vector<std::string> record_files(const std::string& dir, const std::string& stem = "");

// `plait sort run` (sort/run.cc).
int sort_run_main(const std::vector<std::string>& args);

}  // namespace plait::cli
