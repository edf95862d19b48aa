// The shuffle's settings (plait sort run): map output held in memory before spilling, where
// spill files go, and whether sort files bypass the page cache.
#pragma once

#include <cstddef>
#include <string>

#include "core/config.h"

namespace plait::shuffle {

struct ShuffleSettings {
  // PLAIT_SHUFFLE_MEMORY (0: no budget)
  size_t memory_bytes = 0;
  // PLAIT_SHUFFLE_SPILL_DIR ("" = $TMPDIR, else /tmp)
  std::string spill_dir;
  // PLAIT_SHUFFLE_DIRECT_IO: sort files past the page cache
  bool direct_io = true;

  static const size_t settings_index;  // core/settings_registry.h
};

}  // namespace plait::shuffle
