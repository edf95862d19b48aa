// How a layer registers its section of PLAIT_* settings. A section is a plain struct whose
// member defaults are the settings' defaults, with a static index the registry assigns:
//
//   struct TcpSettings {
//     int streams = 2;  // PLAIT_TCP_STREAMS
//     static const size_t settings_index;
//   };
//   // tcp_settings.cc
//   const size_t TcpSettings::settings_index = register_settings<TcpSettings>(
//       "tcp", [] { return std::vector<SettingRow>{ {{"PLAIT_TCP_STREAMS", ...},
//           [](Config& c, ...) { c.get<TcpSettings>().streams = ...; }, ...} }; });
//
// The section's rows then appear in settings() and `plait info`, Config::from_env() parses
// them, and every Config carries the section at its defaults. A section is part of a program
// when its .cc is linked, which code that reads the section (config.get<...>()) ensures.
#pragma once

#include <any>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"

namespace plait {

// One setting: what `plait info` shows, how its text becomes a value in a Config and back.
// `name` lets one parser serve a family of variables (PLAIT_ALGO_<OP>).
struct SettingRow {
  SettingInfo info;
  void (*parse)(Config& config, const std::string& name, const std::string& value);
  std::string (*show)(const Config& config, const std::string& name);
};

// Registers a section (during static initialisation) and returns its index. settings()
// lists the general rows first, then the sections' by section name.
size_t register_settings_section(std::string_view name, std::vector<SettingRow> (*rows)(),
                                 std::any (*make_default)());

template <class Section>
size_t register_settings(std::string_view name, std::vector<SettingRow> (*rows)()) {
  return register_settings_section(name, rows, [] { return std::any(Section{}); });
}

// The general settings' rows (Config's own fields; core_settings.cc).
std::vector<SettingRow> core_setting_rows();

}  // namespace plait
