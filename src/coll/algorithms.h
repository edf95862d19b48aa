// The registry of schedule builders: which algorithms exist for which collective, how to
// build each, and what each costs under the alpha-beta-gamma model. Adding an algorithm is
// one builder file plus one row in algorithms.cc.
#pragma once

#include <vector>

#include "coll/schedule.h"

namespace plait::coll {

// Time model of one point-to-point transfer of n bytes: alpha + n / beta; a reduction of n
// bytes costs n / gamma; a local copy n / copy_bw. Units: microseconds and bytes/us.
struct CostParams {
  double alpha_us = 20.0;
  double beta_bytes_per_us = 1000.0;
  double gamma_bytes_per_us = 4000.0;
  double copy_bytes_per_us = 5000.0;
};

using BuildFn = Schedule (*)(const CollArgs& args);
using CostFn = double (*)(const CollArgs& args, const CostParams& params);

struct AlgorithmInfo {
  CollOp op;
  Algorithm algorithm;
  BuildFn build;
  CostFn cost;
  // Some algorithms apply only to some shapes (e.g. none here need a power of two, but a
  // builder may refuse a shape); null means "always".
  bool (*applies)(const CollArgs& args) = nullptr;
};

// Every registered (op, algorithm) pair.
const std::vector<AlgorithmInfo>& all_algorithms();
// nullptr if the algorithm does not exist for that op.
const AlgorithmInfo* find_algorithm(CollOp op, Algorithm algorithm);
std::vector<Algorithm> algorithms_for(CollOp op);

}  // namespace plait::coll
