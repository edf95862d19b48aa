// Communicator::shrink(): the survivors of a failure agree on who is left (through the
// store, survivor_agreement.h) and form a communicator of them over the same fabric, whose
// connections to the living are unharmed by a peer's death.
#include "coll/communicator_impl.h"
#include "coll/survivor_agreement.h"

namespace plait::coll {

ShrinkResult CommunicatorImpl::shrink(const CallOptions& opts) {
  int nth;
  {
    std::lock_guard lock(subgroup_mu_);
    nth = shrinks_made_++;
  }
  const auto& fabric = engine_->fabric();
  SurvivorAgreement agreed = agree_on_survivors({
      .store = store_.get(),
      .scope = "shrink/" + std::to_string(comm_id_) + "/" + std::to_string(nth),
      .rank = rank(),
      .size = size(),
      .peer_failed = [&](int r) { return fabric->peer_failed(engine_->fabric_rank(r)); },
      .draw_comm_id = [this] { return draw_comm_id(); },
      .timeout = timeout_for(opts),
  });
  if (agreed.comm_id < 0) throw comm_ids_exhausted("shrink");
  std::vector<int> fabric_ranks;
  int new_rank = 0;
  for (size_t i = 0; i < agreed.members.size(); ++i) {
    if (agreed.members[i] == rank()) new_rank = static_cast<int>(i);
    fabric_ranks.push_back(engine_->fabric_rank(agreed.members[i]));
  }
  auto comm = std::make_shared<CommunicatorImpl>(
      fabric, topology_, static_cast<uint32_t>(agreed.comm_id), new_rank,
      std::move(fabric_ranks), store_, config_, timeout_);
  return {.comm = std::move(comm), .survivors = std::move(agreed.members)};
}

}  // namespace plait::coll
