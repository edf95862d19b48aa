// `plait sim train`: one training step replayed on a modelled network (src/sim/train).
//
//   plait sim train --layout FILE | --timeline FILE [--step K]
//                   --topology SPEC [--ranks-per-host M] [--chunk B] [--tune FILE]
//                   [--intra-rate R] [--reduce-rate R] [--replay auto|full|copies|pipeline]
//                   [--sweep [--ranks N] [--tp A,B] [--pp A,B] [--schedules S,T]]
//                   [--json FILE] [--path LINES]
#pragma once

#include <string>
#include <vector>

namespace plait::cli {

int sim_train_main(const std::vector<std::string>& args);

}  // namespace plait::cli
