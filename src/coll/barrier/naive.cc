// Naive barrier: everyone tells rank 0 it arrived, rank 0 releases everyone once all have.
// Zero-element messages; the ordering is explicit because no data carries it.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_barrier_naive(const CollArgs& args) {
  ScheduleBuilder b(args, "naive");
  const Slice token{BufferId::kOutput, 0, 0};
  if (args.rank != 0) {
    b.send(0, token);
    b.recv(0, token);  // rank 0 sends this only after everyone's arrival, ours included
    return std::move(b).finish();
  }
  std::vector<StepId> arrived;
  for (int p = 1; p < args.size; ++p) arrived.push_back(b.recv(p, token));
  for (int p = 1; p < args.size; ++p) b.send(p, token, arrived);
  return std::move(b).finish();
}

}  // namespace plait::coll
