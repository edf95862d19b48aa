// How the survivors of a failure agree on who is left (ULFM's MPI_Comm_shrink agreement),
// through the rendezvous store rather than the broken connections.
//
// Every survivor registers itself, reports the peers whose connections it saw fail, and
// waits until each rank of the old group is accounted for: registered, or reported dead by
// someone. The first survivor to see that (or to reach the deadline) claims the decision
// with an atomic counter and publishes the member list with a fresh communicator id; every
// other survivor adopts it. So every survivor gets the same list, and a rank that joins
// after the decision is told it was left out instead of forming a group of its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "plait/error.h"
#include "plait/store.h"

namespace plait::coll {

struct SurvivorAgreement {
  int64_t comm_id = -1;      // drawn by the survivor that decided (-1: ids exhausted)
  std::vector<int> members;  // old ranks, ascending; the new rank of members[i] is i
};

struct SurvivorAgreementArgs {
  Store* store = nullptr;
  std::string scope;  // key prefix shared by exactly the survivors of this shrink
  int rank = 0;       // this rank in the old group
  int size = 0;       // the old group's size
  // True once this rank's transport saw the old rank's connection fail.
  std::function<bool(int)> peer_failed;
  std::function<int64_t()> draw_comm_id;  // called once, by the deciding survivor
  std::chrono::milliseconds timeout{0};
  // How often the store is looked at while ranks are unaccounted for.
  std::chrono::microseconds poll{2000};
};

// Throws Error(kAborted) when this rank is not in the decision, Error(kTimeout) when the
// decision never appears (the deciding survivor died while deciding), and the store's errors
// (a dead store), each with the rank and op "shrink".
SurvivorAgreement agree_on_survivors(const SurvivorAgreementArgs& args);

}  // namespace plait::coll
