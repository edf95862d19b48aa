// Calls the simulator's tests replay: the shape of a collective, as src/coll's builders take it.
#pragma once

#include <cstddef>

#include "coll/schedule/schedule.h"

namespace plait::sim {

// An allreduce of `count` f32 elements (sum).
inline coll::CollArgs allreduce_of(size_t count) {
  coll::CollArgs a;
  a.op = coll::CollOp::kAllreduce;
  a.dtype = DataType::kF32;
  a.count = count;
  return a;
}

}  // namespace plait::sim
