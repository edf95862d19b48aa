// Whether one rank's schedule is another's with its peers relabelled: the test both reductions
// of the replay (symmetric_replay.h, rank_copies.h) make before one rank stands for others.
#pragma once

#include <cstddef>

#include "coll/schedule/schedule.h"

namespace plait::sim {

// `other` has `rep`'s steps, with the same kinds, sizes and dependencies, and each peer p of
// `rep` replaced by peer_of(p). Offsets may differ (a ring's ranks start on other blocks).
template <typename PeerOf>
bool relabelled(const coll::Schedule& rep, const coll::Schedule& other, PeerOf peer_of) {
  if (rep.steps.size() != other.steps.size() || rep.deps != other.deps) return false;
  for (size_t i = 0; i < rep.steps.size(); ++i) {
    const coll::Step& a = rep.steps[i];
    const coll::Step& b = other.steps[i];
    if (a.kind != b.kind || a.src.count != b.src.count || a.dst.count != b.dst.count ||
        a.dep_begin != b.dep_begin || a.dep_count != b.dep_count)
      return false;
    if ((a.peer < 0) != (b.peer < 0)) return false;
    if (a.peer >= 0 && b.peer != peer_of(a.peer)) return false;
  }
  return true;
}

}  // namespace plait::sim
