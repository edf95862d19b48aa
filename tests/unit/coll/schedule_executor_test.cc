// The order a ScheduleExecutor issues ready steps in. A pipelined schedule makes every chunk
// of a send ready at once; a peer's transport moves messages in the order they are posted,
// so the executor must post them in schedule order. It used to take its ready list from the
// back: a binomial tree's leaf sent its last chunk first, the root reduced nothing until the
// leaf's last message came, and the broadcast half of the allreduce waited for the whole
// reduce (16 MiB on four 1 Gbit/s hosts: 517-536 ms, 345-382 ms in order).
#include <gtest/gtest.h>

#include <vector>

#include "coll/schedule/builder.h"
#include "coll/schedule/executor.h"
#include "coll/schedule/tags.h"
#include "unit/transport/fabric_pair.h"

namespace plait::coll {
namespace {

using transport::test::FabricPair;
using transport::test::wait_one;

class ScheduleExecutorOrder : public FabricPair {};

TEST_F(ScheduleExecutorOrder, AChunkedSendLeavesInChunkOrder) {
  constexpr int kChunks = 6;
  constexpr uint32_t kComm = 9;
  CollArgs args;
  args.rank = 1;
  args.size = 2;
  args.count = kChunks;
  args.chunk_count = 1;
  ScheduleBuilder b(args, "test");
  b.send_chunks(0, in_slice({0, kChunks}), 1);
  const Schedule schedule = std::move(b).finish();

  // Rank 0 posts a receive per message, last first, so that the order they complete in is
  // the order the messages arrive in and not the order they were posted in.
  Signature sig;
  sig.count = kChunks;
  std::vector<float> in(kChunks, 1.0f), out(kChunks, 0.0f);
  for (int i = kChunks - 1; i >= 0; --i)
    f(0).recv(1, &out[i], sizeof(float), make_tag(kComm, TagKind::kCollective, i), &cq(0), i);

  std::vector<int> fabric_rank = {0, 1};
  std::vector<uint64_t> sent(2, 0), received(2, 0);
  ExecPeers peers{.fabric = &f(1), .cq = &cq(1), .fabric_rank = &fabric_rank,
                  .comm_id = kComm, .sent = &sent, .received = &received};
  ScheduleExecutor exec(schedule, ExecBuffers{.input = in.data()}, sig, peers, 1, 0);
  exec.start();

  std::vector<uint64_t> arrived;
  for (int i = 0; i < kChunks; ++i) {
    transport::Completion c = wait_one(cq(0));
    ASSERT_TRUE(c.ok()) << c.error->what();
    arrived.push_back(c.context);
  }
  while (!exec.done()) exec.on_completion(wait_one(cq(1)));
  ASSERT_EQ(exec.error(), nullptr) << exec.error()->what();
  EXPECT_EQ(arrived, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5}));
}

}  // namespace
}  // namespace plait::coll
