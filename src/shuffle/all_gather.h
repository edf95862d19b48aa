// Every rank's bytes to every rank, over an rdma::Fabric's two-sided messages: for the small
// things a shuffle's ranks agree on before moving data (key samples, phase times). Not for
// bulk data (each rank sends its bytes to every peer directly).
#pragma once

#include <cstdint>
#include <vector>

#include "plait/rdma.h"

namespace plait::shuffle {

// Collective; `tag` must be the same on every rank and not used by anything else in flight
// on the fabric. result[r] is rank r's bytes (ours included). Throws plait::Error naming the
// peer on a failure, or on a wait longer than the fabric's timeout.
std::vector<std::vector<uint8_t>> all_gather(rdma::Fabric& fabric, const std::vector<uint8_t>& mine,
                                             uint64_t tag);

}  // namespace plait::shuffle
