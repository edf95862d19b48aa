#include "moe/moe_settings.h"

#include <string_view>
#include <vector>

#include "core/setting_parsers.h"
#include "core/settings_registry.h"

namespace plait::moe {
namespace {

constexpr std::string_view kPathNames[] = {"auto", "alltoallv", "one-sided"};

std::vector<SettingRow> rows() {
  return {
      {{"PLAIT_MOE_PATH", enum_type(kPathNames), "auto",
        "Expert parallelism: how dispatch and combine move rows (auto: the cost model measured at creation; "
        "alltoallv: counts first, then an alltoallv; one-sided: writes into preregistered windows)"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.get<MoeSettings>().path = std::string(kPathNames[parse_choice(n, v, kPathNames)]);
       },
       [](const Config& c, const std::string&) { return c.get<MoeSettings>().path; }},
  };
}

}  // namespace

const size_t MoeSettings::settings_index = register_settings<MoeSettings>("moe", rows);

}  // namespace plait::moe
