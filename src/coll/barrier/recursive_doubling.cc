// Dissemination barrier (Hensgen, Finkel & Manber): in round i rank r signals r + 2^i and
// waits for r - 2^i. After ceil(log2 n) rounds every rank has transitively heard from every
// other, for any n. A round's signal waits for the previous round's; receives may be
// posted at once.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_barrier_recursive_doubling(const CollArgs& args) {
  ScheduleBuilder b(args, "recursive_doubling");
  const Slice token{BufferId::kOutput, 0, 0};
  const int n = args.size;
  std::vector<StepId> heard;
  for (int dist = 1; dist < n; dist <<= 1) {
    b.send(wrap(args.rank + dist, n), token, heard);
    heard = {b.recv(wrap(args.rank - dist, n), token)};
  }
  return std::move(b).finish();
}

}  // namespace plait::coll
