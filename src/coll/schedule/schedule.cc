#include "coll/schedule/schedule.h"

#include <cassert>

namespace plait::coll {

std::string_view to_string(Algorithm algo) {
  switch (algo) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kNaive: return "naive";
    case Algorithm::kPs: return "ps";
    case Algorithm::kRing: return "ring";
    case Algorithm::kHalvingDoubling: return "halving_doubling";
    case Algorithm::kRecursiveDoubling: return "recursive_doubling";
    case Algorithm::kBinomialTree: return "binomial_tree";
    case Algorithm::kDoubleBinaryTree: return "double_binary_tree";
    case Algorithm::kHierarchical: return "hierarchical";
    case Algorithm::kShm: return "shm";
  }
  return "?";
}

bool parse_algorithm(std::string_view name, Algorithm* out) {
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kNaive, Algorithm::kPs, Algorithm::kRing,
                      Algorithm::kHalvingDoubling, Algorithm::kRecursiveDoubling,
                      Algorithm::kBinomialTree, Algorithm::kDoubleBinaryTree,
                      Algorithm::kHierarchical, Algorithm::kShm}) {
    if (to_string(a) == name) {
      *out = a;
      return true;
    }
  }
  if (name.empty()) {
    *out = Algorithm::kAuto;
    return true;
  }
  return false;
}

std::string_view to_string(StepKind kind) {
  switch (kind) {
    case StepKind::kSend: return "send";
    case StepKind::kRecv: return "recv";
    case StepKind::kRecvReduce: return "recv_reduce";
    case StepKind::kCopy: return "copy";
    case StepKind::kReduce: return "reduce";
  }
  return "?";
}

StepId Schedule::add(Step step, std::span<const StepId> after) {
  step.dep_begin = static_cast<uint32_t>(deps.size());
  step.dep_count = static_cast<uint32_t>(after.size());
  for (StepId d : after) {
    assert(d < steps.size() && "a dependency must be an earlier step");
    deps.push_back(d);
  }
  steps.push_back(step);
  return static_cast<StepId>(steps.size() - 1);
}

StepId Schedule::send(int peer, Slice src, std::span<const StepId> after) {
  return add(Step{.kind = StepKind::kSend, .peer = peer, .src = src}, after);
}

StepId Schedule::recv(int peer, Slice dst, std::span<const StepId> after) {
  return add(Step{.kind = StepKind::kRecv, .peer = peer, .dst = dst}, after);
}

StepId Schedule::recv_reduce(int peer, Slice staging, Slice accum, std::span<const StepId> after) {
  return add(Step{.kind = StepKind::kRecvReduce, .peer = peer, .src = staging, .dst = accum}, after);
}

StepId Schedule::copy(Slice src, Slice dst, std::span<const StepId> after) {
  return add(Step{.kind = StepKind::kCopy, .src = src, .dst = dst}, after);
}

StepId Schedule::reduce(Slice src, Slice dst, std::span<const StepId> after) {
  return add(Step{.kind = StepKind::kReduce, .src = src, .dst = dst}, after);
}

size_t Schedule::alloc_scratch(size_t count) {
  size_t offset = scratch_count;
  scratch_count += count;
  return offset;
}

}  // namespace plait::coll
