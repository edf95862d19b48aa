#include "sim/schedule_size.h"

#include <algorithm>
#include <cstdint>

namespace plait::sim {

// Steps and sends of all ranks' schedules: the first 16 ranks counted one by one (where the
// roots of a parameter server or a tree are, whose schedules are the large ones: sampled, rank
// 0 of a 16,384-rank ps allreduce stood for 256 ranks and made 131,000 messages look like
// 4.3 million), the rest from up to 64 ranks spread evenly among them (exact when every rank
// is counted, or when their schedules are alike).
ScheduleSize sample_schedule_size(const coll::CollArgs& args, const coll::AlgorithmInfo& info,
                                  int ranks) {
  ScheduleSize size;
  auto count = [&](int rank, double weight) {
    coll::CollArgs one = args;
    one.rank = rank;
    const coll::Schedule s = info.build(one);
    size.steps += weight * static_cast<double>(s.steps.size());
    for (const coll::Step& step : s.steps)
      if (step.kind == coll::StepKind::kSend) size.sends += weight;
  };
  const int head = std::min(ranks, 16);
  for (int r = 0; r < head; ++r) count(r, 1);
  const int rest = ranks - head;
  const int samples = std::min(rest, 64);
  for (int i = 0; i < samples; ++i)
    count(head + static_cast<int>(static_cast<int64_t>(i) * rest / samples),
          static_cast<double>(rest) / samples);
  return size;
}

}  // namespace plait::sim
