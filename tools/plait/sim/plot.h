// `plait sim ... --plot FILE.png`: the JSON records a sim command wrote, drawn with matplotlib
// by the project's Python (.venv/bin/python, which `make` installs; PLAIT_PYTHON overrides it). The plotting script
// travels inside the binary, so the plot needs no file of plait's beside it.
#pragma once

#include <string>

namespace plait::cli {

enum class SimPlotKind {
  kSweep,      // busbw against bytes, a line per algorithm, a panel per topology and rank count
  kAlgorithms  // one point: time per algorithm, the fastest and the cost model's pick marked
};

// Draws `json_path` (one record per line) into `png_path`, then removes `json_path` when it is
// `temporary` (whether drawing worked or not). Throws Error(kSystem) naming what failed (no
// python3, no matplotlib, the script's message).
void plot_sim_records(SimPlotKind kind, const std::string& json_path, bool temporary,
                      const std::string& png_path, const std::string& title);

}  // namespace plait::cli
