// Hierarchical allreduce, the bandwidth-optimal variant: a ring reduce-scatter among the
// ranks of each host (shared memory in practice), an allreduce of each shard across hosts
// among the ranks that own it, and a ring allgather within each host. Each of a host's s
// ranks sends at most ~2m/s of an m-byte vector to other hosts, while every cross-host hop
// of a flat ring carries 2m(n-1)/n and paces all of the ring's steps.
//
// Shards: the vector is cut into G = (ranks on the most populated host) shards. On a host
// of s ranks, local rank l owns the contiguous shards [l*G/s, (l+1)*G/s): one each when all
// hosts are equal (the usual same-local-index groups), several on a host with fewer ranks,
// so uneven layouts like {0,0,0,1} work; then shard j's inter-host group is that shard's
// owner on every host. Hosts are ordered by label, a host's ranks by rank, so every rank
// derives the same groups; ranks of one host need not be contiguous.
//
// Across hosts each shard runs a ring (large shards) or recursive doubling (small ones),
// as hierarchical_inter_ring decides. With chunk_count set every phase is chunked and the
// builder's hazard tracking chains them chunk by chunk: a shard chunk leaves the host as
// soon as it is reduced within it. With host_of empty (one host) this is a ring allreduce.
//
// With CollArgs::intra_on_segment the intra-host phases are not steps at all: the engine
// reduces into each host's first rank over the host's collective segment before this
// schedule runs and broadcasts from it afterwards. The schedule is then the allreduce of the
// whole vector, in the output, among those first ranks (a lone rank copies its input there
// first), and empty for every other rank.
#include "coll/schedule/hosts.h"
#include "coll/schedule/phases.h"
#include "coll/select/algorithms.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_allreduce_hierarchical(const CollArgs& args) {
  ScheduleBuilder b(args, "hierarchical");
  const HostLayout hosts = host_layout(args);
  const int me = args.rank;
  const int my_host = hosts.host[static_cast<size_t>(me)];
  const int s = hosts.ranks_on(my_host);
  const int shards = hosts.max_local();
  auto shard = [&](int j) { return even_block(args.count, shards, j); };
  // First shard owned by local rank l on a host of `on` ranks; l == on gives the end.
  auto first = [&](int on, int l) { return l * shards / on; };
  // The contiguous elements local rank l of this host owns.
  auto block = [&](int l) {
    const int lo = first(s, l), hi = first(s, l + 1);
    const size_t begin = shard(lo).offset;
    return Range{begin, shard(hi - 1).end() - begin};
  };

  const Group local{hosts.ranks[static_cast<size_t>(my_host)],
                    hosts.local[static_cast<size_t>(me)]};
  if (args.intra_on_segment) {
    if (local.pos != 0) return std::move(b).finish();
    if (s == 1 && !args.in_place) b.copy(in_slice({0, args.count}), out_slice({0, args.count}));
    Group firsts;
    for (int h = 0; h < hosts.hosts(); ++h) firsts.ranks.push_back(hosts.ranks[static_cast<size_t>(h)][0]);
    firsts.pos = my_host;
    const Slice data = out_slice({0, args.count});
    if (hierarchical_inter_ring(args, hosts.hosts(), data.count))
      ring_allreduce_in_place(b, firsts, data);
    else
      recursive_doubling_allreduce_in_place(b, firsts, data);
    return std::move(b).finish();
  }
  if (s == 1) {
    b.copy(in_slice({0, args.count}), out_slice({0, args.count}));
  } else {
    ring_reduce_scatter(b, local,
                        {.final_block = local.pos,
                         .own = [&](int l) { return in_slice(block(l)); },
                         .acc = [&](int l, int) { return out_slice(block(l)); },
                         .acc_holds_own = args.in_place});
  }

  if (hosts.hosts() > 1) {
    for (int j = first(s, local.pos); j < first(s, local.pos + 1); ++j) {
      Group across;
      for (int h = 0; h < hosts.hosts(); ++h) {
        const int on = hosts.ranks_on(h);
        const int owner = ((j + 1) * on - 1) / shards;  // the l with first(on, l) <= j < next
        across.ranks.push_back(hosts.ranks[static_cast<size_t>(h)][static_cast<size_t>(owner)]);
      }
      across.pos = my_host;
      const Slice data = out_slice(shard(j));
      if (hierarchical_inter_ring(args, hosts.hosts(), data.count))
        ring_allreduce_in_place(b, across, data);
      else
        recursive_doubling_allreduce_in_place(b, across, data);
    }
  }

  if (s > 1) {
    ring_allgather(b, local,
                   {.first_block = local.pos,
                    .dst = [&](int l) { return out_slice(block(l)); },
                    .held = nullptr});
  }
  return std::move(b).finish();
}

}  // namespace plait::coll
