// What tests of a schedule's orderings ask: the steps one step waits for, directly or
// through others, and which steps are zero-byte tokens (handshakes, acknowledgements).
#pragma once

#include <set>
#include <vector>

#include "coll/schedule/schedule.h"

namespace plait::coll {

inline std::set<StepId> ancestors(const Schedule& s, StepId step) {
  std::set<StepId> seen;
  for (std::vector<StepId> todo = {step}; !todo.empty();) {
    const StepId x = todo.back();
    todo.pop_back();
    for (StepId d : s.deps_of(s.steps[x]))
      if (seen.insert(d).second) todo.push_back(d);
  }
  return seen;
}

inline bool is_token(const Step& s) {
  return (s.kind == StepKind::kSend && s.src.count == 0) ||
         (s.kind == StepKind::kRecv && s.dst.count == 0);
}

}  // namespace plait::coll
