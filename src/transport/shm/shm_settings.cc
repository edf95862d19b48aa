#include "transport/shm/shm_settings.h"

#include <cstdio>
#include <limits>
#include <string_view>
#include <vector>

#include "core/setting_parsers.h"
#include "core/settings_registry.h"
#include "plait/error.h"

namespace plait::transport {
namespace {

constexpr std::string_view kCmaModes[] = {"auto", "on", "off"};

std::vector<SettingRow> rows() {
  return {
      {{"PLAIT_SHM_CMA", enum_type(kCmaModes), "auto",
        "shm provider: single-copy cross-memory attach (process_vm_readv); off = copy via rings"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.get<ShmSettings>().cma = kCmaModes[parse_choice(n, v, kCmaModes)];
       },
       [](const Config& c, const std::string&) { return c.get<ShmSettings>().cma; }},
  };
}

}  // namespace

const size_t ShmSettings::settings_index = register_settings<ShmSettings>("shm", rows);

}  // namespace plait::transport
