#include "coll/deadline/wire.h"

namespace plait::deadline::wire {

ContributionHeader check_contribution(const char* in, size_t bytes, uint64_t step, int rank,
                                      const ErrorContext& ctx) {
  ContributionHeader h;
  std::memcpy(&h, in, sizeof h);
  if (h.magic != kContributionMagic || h.step != step)
    throw invalid_usage("rank " + std::to_string(rank) + " sent a malformed contribution to step " +
                            std::to_string(step),
                        ctx);
  return h;
}

}  // namespace plait::deadline::wire
