// Allreduce of compressed gradients: every rank's values compressed (with its error
// feedback), moved in compressed form, and the reduction written back on every rank.
//
//   auto comm = plait::Communicator::create(bootstrap);
//   auto c = plait::compress::Compressor::create(plait::compress::Method::kPowerSgd, {.rank = 4});
//   plait::compress::State state;  // per tensor, kept across steps
//   plait::compress::allreduce(*comm, grad, n, *c, &state);  // grad now holds the mean
//
// How each method moves:
//   fp16, bf16     allreduce of the 16-bit values (summed in 16 bits, as NCCL's half sums)
//   int8           allreduce (max) of the chunks' scales, then every rank quantises with the
//                  shared scales and an integer allreduce sums the quanta, on a wire whose
//                  integers hold ranks x levels, so that the sum cannot overflow at any rank
//                  count: up to 127 ranks int8 at min(levels, 127 / ranks) levels; up to
//                  32767 two 16-bit lanes per int32 at min(levels, 32767 / ranks); beyond,
//                  int32
//   randomk        the ranks draw the same indices (same seed, same calls): an allreduce of
//                  the k values
//   powersgd       allreduce of P, orthonormalisation, Q = M^T P, allreduce of Q (PowerSGD's
//                  own schedule); every rank starts from the same Q
//   sign, topk,    allgather of the wires (allgatherv for threshold's, whose sizes differ),
//   threshold      each decompressed and added in rank order
#pragma once

#include <cstddef>
#include <string>

#include "plait/communicator.h"
#include "plait/compress.h"

namespace plait::compress {

struct AllreduceStats {
  std::string path;              // how it moved: "allreduce f16", "allgather", ...
  size_t wire_bytes = 0;         // what this rank handed to the collectives
  double compress_seconds = 0;   // compressing, and for powersgd the products and Gram-Schmidt
  double communicate_seconds = 0;
  double decompress_seconds = 0;
};

// Collective: every rank passes the same count, an equal compressor (method and parameters)
// and its own state for this tensor (or none: no error feedback). On return data[0..count)
// holds, on every rank, the sum of what the ranks' compressed values carry, or their mean
// with `average`. With a state, what this rank's wire did not carry stays in it for the next
// call. Throws plait::Error: invalid usage for values that are not f32-sized arguments or a
// state of another tensor; the communicator's errors (a dead peer, ranks that disagree on
// the count) as they come.
AllreduceStats allreduce(Communicator& comm, float* data, size_t count, const Compressor& compressor,
                         State* state, bool average = true);

}  // namespace plait::compress
