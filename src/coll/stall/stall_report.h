// The stall inspector's words: what each rank says about itself in a round (a line in the
// store), and the one-paragraph summary every rank logs, such as
//
//   allreduce #1043 (count 4194304, f32, sum) has waited 10.2 s on ranks 0-4, 6; ranks 5 and
//   7 have not called it: rank 5 is in no collective (the last it finished: allreduce #1042
//   (...)); rank 7 is in broadcast #1042 (count 1, f32, root 0)
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coll/schedule/signature.h"

namespace plait::coll {

struct RankState {
  bool answered = false;      // false: no line from this rank in the round
  bool in_collective = false;
  bool started = false;       // some collective has started on it
  // in_collective: the collective it is in; else, if started, the last one it finished.
  Signature current;
  double waited_s = 0;        // in_collective: for how long it has been seen in it
};

std::string encode_state(const RankState& state);
// nullopt for a line that does not parse (a peer of another version, a damaged store).
std::optional<RankState> decode_state(std::string_view line);

// states[r]: rank r's answer (answered false when it gave none).
std::string stall_summary(const std::vector<RankState>& states);

}  // namespace plait::coll
