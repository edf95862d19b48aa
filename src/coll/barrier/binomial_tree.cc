// Binomial-tree barrier: arrivals flow up a binomial tree to rank 0, the release flows
// back down. 2 ceil(log2 n) steps, at most ceil(log2 n) messages at any rank.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_barrier_binomial_tree(const CollArgs& args) {
  ScheduleBuilder b(args, "binomial_tree");
  const Slice token{BufferId::kOutput, 0, 0};
  const TreeNode node = binomial_node(args.size, args.rank);
  std::vector<StepId> below;
  for (int child : node.children) below.push_back(b.recv(child, token));
  std::vector<StepId> released = below;
  if (node.parent >= 0) {
    b.send(node.parent, token, below);
    released = {b.recv(node.parent, token)};
  }
  for (int child : node.children) b.send(child, token, released);
  return std::move(b).finish();
}

}  // namespace plait::coll
