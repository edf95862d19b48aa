// The naive algorithms post every send at once, and a rank's messages leave roughly in the
// order they were posted. In rank order every rank's first message went to rank 0 and its
// last to rank n-1, which then finished last and started the next call late (naive
// reduce-scatter, 1 MiB on eight 200 Mbit/s namespace hosts: 50-70 ms against 38 once each
// rank starts with its right-hand neighbour). The reduction order stays rank order; the
// registry's sweep runs these schedules through the checker against the reference.
#include <gtest/gtest.h>

#include <vector>

#include "coll/select/algorithms.h"

namespace plait::coll {
namespace {

CollArgs naive_args(CollOp op, int size, int rank) {
  CollArgs a;
  a.op = op;
  a.dtype = DataType::kF32;
  a.size = size;
  a.rank = rank;
  a.count = static_cast<size_t>(size) * 256;
  return a;
}

std::vector<int> send_peers(const Schedule& s) {
  std::vector<int> peers;
  for (const Step& step : s.steps)
    if (step.kind == StepKind::kSend) peers.push_back(step.peer);
  return peers;
}

TEST(SendOrder, NaiveEveryRankStartsWithItsRightHandNeighbour) {
  for (CollOp op : {CollOp::kAllreduce, CollOp::kReduceScatter, CollOp::kAllgather,
                    CollOp::kAlltoall}) {
    for (int size : {2, 5, 8}) {
      for (int rank = 0; rank < size; ++rank) {
        const Schedule s =
            find_algorithm(op, Algorithm::kNaive)->build(naive_args(op, size, rank));
        std::vector<int> expected;
        for (int k = 1; k < size; ++k) expected.push_back((rank + k) % size);
        EXPECT_EQ(send_peers(s), expected) << to_string(op) << " size " << size << " rank "
                                           << rank;
      }
    }
  }
}

TEST(SendOrder, NaiveReductionsStillCombineInRankOrder) {
  // Bit-identical sums on every rank: the receives reduce in rank order whatever the sends'.
  const int size = 5;
  for (int rank = 0; rank < size; ++rank) {
    const Schedule s = find_algorithm(CollOp::kAllreduce, Algorithm::kNaive)
                           ->build(naive_args(CollOp::kAllreduce, size, rank));
    std::vector<int> order;
    for (const Step& step : s.steps)
      if (step.kind == StepKind::kRecvReduce || step.kind == StepKind::kRecv)
        order.push_back(step.peer);
    std::vector<int> expected;
    for (int p = 0; p < size; ++p)
      if (p != rank) expected.push_back(p);
    EXPECT_EQ(order, expected) << "rank " << rank;
  }
}

}  // namespace
}  // namespace plait::coll
