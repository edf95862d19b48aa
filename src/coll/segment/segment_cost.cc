#include "coll/segment/segment_cost.h"

#include "coll/segment/segment_run.h"

namespace plait::coll::segment {

bool segment_applies(const CollArgs& args) {
  return args.segment_slot_bytes > 0 && args.host_of.empty();
}

// Each round costs one flag per exchange it waits for; the data terms are whole memory
// passes over the rank's bytes: copies into and out of the segment (copy rate) and the
// reductions (gamma), as segment_run.h does them.
double segment_cost(const CollArgs& args, const CostParams& params) {
  if (!segment_applies(args)) return 1e30;
  const double p = args.size;
  const double rounds = static_cast<double>(SegmentRun::rounds_for(args, args.segment_slot_bytes));
  const double f = params.flag_us;
  const double C = 1.0 / params.copy_bytes_per_us;
  const double G = 1.0 / params.gamma_bytes_per_us;
  const double m = static_cast<double>(args.count) * static_cast<double>(dtype_size(args.dtype));
  const double chunk = m / rounds;
  switch (args.op) {
    case CollOp::kAllreduce:
    case CollOp::kReduce:
      if (SegmentRun::splits(args, static_cast<size_t>(chunk), args.segment_slot_bytes))
        return rounds * 2 * f + 2 * m * C + (p - 1) / p * m * G;
      return rounds * f + m * C + (p - 1) * m * G;
    case CollOp::kBroadcast: return rounds * f + 2 * m * C;
    case CollOp::kAllgather: return rounds * f + m * C + p * m * C;
    case CollOp::kReduceScatter: return rounds * f + p * m * C + (p - 1) * m * G;
    case CollOp::kBarrier: return f;
    default: return 1e30;  // not offered (no row in the registry)
  }
}

}  // namespace plait::coll::segment
