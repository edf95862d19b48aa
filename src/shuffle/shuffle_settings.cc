#include "shuffle/shuffle_settings.h"

#include <cstdio>
#include <limits>
#include <string_view>
#include <vector>

#include "core/setting_parsers.h"
#include "core/settings_registry.h"
#include "plait/error.h"

namespace plait::shuffle {
namespace {

std::vector<SettingRow> rows() {
  return {
      {{"PLAIT_SHUFFLE_MEMORY", "bytes, or 0 (no budget)", "0",
        "Shuffle (plait sort run): map output kept in memory per rank before runs spill to files; also bounds a reducer's merge windows"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.get<ShuffleSettings>().memory_bytes = v == "0" ? 0 : parse_bytes_setting(n, v, 1);
       },
       [](const Config& c, const std::string&) {
         return c.get<ShuffleSettings>().memory_bytes == 0 ? std::string("0") : format_bytes(c.get<ShuffleSettings>().memory_bytes);
       }},
      {{"PLAIT_SHUFFLE_SPILL_DIR", "string", "",
        "Shuffle: directory of spill files (created unlinked, gone with the process); empty = $TMPDIR, else /tmp"},
       [](Config& c, const std::string&, const std::string& v) { c.get<ShuffleSettings>().spill_dir = trim(v); },
       [](const Config& c, const std::string&) { return c.get<ShuffleSettings>().spill_dir; }},
      {{"PLAIT_SHUFFLE_DIRECT_IO", "0 or 1", "1",
        "plait sort gen/run and the shuffle's spill: record and spill files written, and record files read, past the page cache (O_DIRECT where the file system has it)"},
       [](Config& c, const std::string& n, const std::string& v) {
         const std::string t = trim(v);
         if (t != "0" && t != "1") throw invalid_usage(n + " takes 0 or 1, not '" + v + "'");
         c.get<ShuffleSettings>().direct_io = t == "1";
       },
       [](const Config& c, const std::string&) { return std::string(c.get<ShuffleSettings>().direct_io ? "1" : "0"); }},
  };
}

}  // namespace

const size_t ShuffleSettings::settings_index = register_settings<ShuffleSettings>("shuffle", rows);

}  // namespace plait::shuffle
