#include "coll/deadline/wire.h"

namespace plait::deadline::wire {
namespace {

bool known(ReduceOp op) {
  for (ReduceOp o : kAllReduceOps)
    if (o == op) return true;
  return false;
}

}  // namespace

ContributionHeader check_contribution(const char* in, size_t bytes, uint64_t step, int rank,
                                      const ErrorContext& ctx) {
  ContributionHeader h;
  std::memcpy(&h, in, sizeof h);
  const auto bad = [&](const std::string& why) {
    return invalid_usage("rank " + std::to_string(rank) + " sent a malformed contribution to step " +
                             std::to_string(step) + why,
                         ctx);
  };
  if (bytes != sizeof h) throw bad(" (" + std::to_string(bytes) + " bytes)");
  if (h.magic != kContributionMagic || h.step != step) throw bad("");
  // What the aggregator sizes and reduces by: a dtype of no size would divide by zero in
  // chunking(), and values past what a vector can hold would throw std::length_error.
  const size_t elem = dtype_size(static_cast<DataType>(h.dtype));
  if (elem == 0) throw bad(": no dtype " + std::to_string(h.dtype));
  if (!known(static_cast<ReduceOp>(h.op))) throw bad(": no reduction op " + std::to_string(h.op));
  if (h.count > PTRDIFF_MAX / elem) throw bad(": " + std::to_string(h.count) + " values");
  return h;
}

}  // namespace plait::deadline::wire
