// Every schedule builder, one per (collective, algorithm); the registry in algorithms.cc
// pairs each with its cost function. A builder returns this rank's schedule for the call
// described by args, or throws plait::Error (invalid usage) for args no call can have.
// All accept any size >= 1, any count (0 included), any root, in place or not, and honour
// args.chunk_count where they pipeline.
#pragma once

#include "coll/schedule/schedule.h"

namespace plait::coll {

Schedule build_allreduce_naive(const CollArgs& args);
Schedule build_allreduce_ps(const CollArgs& args);
Schedule build_allreduce_ring(const CollArgs& args);
Schedule build_allreduce_halving_doubling(const CollArgs& args);
Schedule build_allreduce_recursive_doubling(const CollArgs& args);
Schedule build_allreduce_binomial_tree(const CollArgs& args);
Schedule build_allreduce_double_binary_tree(const CollArgs& args);
Schedule build_allreduce_hierarchical(const CollArgs& args);  // any host_of, empty included

Schedule build_reduce_naive(const CollArgs& args);
Schedule build_reduce_binomial_tree(const CollArgs& args);
Schedule build_reduce_ring(const CollArgs& args);
Schedule build_reduce_halving_doubling(const CollArgs& args);

Schedule build_broadcast_naive(const CollArgs& args);
Schedule build_broadcast_binomial_tree(const CollArgs& args);
Schedule build_broadcast_ring(const CollArgs& args);
Schedule build_broadcast_halving_doubling(const CollArgs& args);

Schedule build_allgather_naive(const CollArgs& args);
Schedule build_allgather_ring(const CollArgs& args);
Schedule build_allgather_recursive_doubling(const CollArgs& args);
Schedule build_allgather_binomial_tree(const CollArgs& args);
Schedule build_allgatherv_naive(const CollArgs& args);
Schedule build_allgatherv_ring(const CollArgs& args);
Schedule build_allgatherv_binomial_tree(const CollArgs& args);

Schedule build_reduce_scatter_naive(const CollArgs& args);
Schedule build_reduce_scatter_ring(const CollArgs& args);
Schedule build_reduce_scatter_halving_doubling(const CollArgs& args);
Schedule build_reduce_scatter_binomial_tree(const CollArgs& args);
Schedule build_reduce_scatterv_naive(const CollArgs& args);
Schedule build_reduce_scatterv_ring(const CollArgs& args);
Schedule build_reduce_scatterv_binomial_tree(const CollArgs& args);

Schedule build_alltoall_naive(const CollArgs& args);
Schedule build_alltoall_ring(const CollArgs& args);
Schedule build_alltoallv_naive(const CollArgs& args);
Schedule build_alltoallv_ring(const CollArgs& args);

Schedule build_gather_naive(const CollArgs& args);
Schedule build_gather_binomial_tree(const CollArgs& args);
Schedule build_scatter_naive(const CollArgs& args);
Schedule build_scatter_binomial_tree(const CollArgs& args);

Schedule build_barrier_naive(const CollArgs& args);
Schedule build_barrier_recursive_doubling(const CollArgs& args);
Schedule build_barrier_binomial_tree(const CollArgs& args);

}  // namespace plait::coll
