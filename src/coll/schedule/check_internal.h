// What the checker's static half (schedule_check.cc) and its executor
// (schedule_check_run.cc) share. Not for use outside the checker.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "coll/schedule/check.h"

namespace plait::coll::check_detail {

inline bool is_transfer(StepKind k) { return k != StepKind::kCopy && k != StepKind::kReduce; }

// Per ordered pair (a, b), index a * n + b: a's sends to b and b's receives from a, in order.
struct Pairs {
  int n = 0;
  std::vector<std::vector<StepId>> sends, recvs;
  std::vector<std::vector<uint32_t>> slot;  // [rank][step]: index within its pair list
};

// Fills pairs from the schedules' transfers; returns what breaks the matching contract of
// schedule.h, or an empty string.
std::string match_pairs(std::span<const Schedule> schedules, Pairs* pairs);

// Part (c) of schedule_check.h, for schedules that passed validation.
CheckResult run_schedules(std::span<const CollArgs> args, std::span<const Schedule> schedules,
                          std::span<const RankBuffers> buffers, const CheckOptions& options);

}  // namespace plait::coll::check_detail
