#include "plait/run/launcher_settings.h"

#include <cstdio>
#include <limits>
#include <string_view>
#include <vector>

#include "core/setting_parsers.h"
#include "core/settings_registry.h"
#include "plait/error.h"

namespace plait::cli {
namespace {

std::vector<SettingRow> rows() {
  return {
      {{"PLAIT_RUN_GRACE_S", "seconds", "3",
        "plait run: time between SIGTERM and SIGKILL when it stops ranks; also 500ms", true},
       [](Config& c, const std::string& n, const std::string& v) {
         int64_t us = parse_duration_us(v, 1000000);
         if (us < 0) reject(n, v, "a duration: seconds, or 500ms, 2m");
         c.get<LauncherSettings>().grace = std::chrono::milliseconds((us + 999) / 1000);
       },
       [](const Config& c, const std::string&) {
         char text[32];
         std::snprintf(text, sizeof text, "%g", c.get<LauncherSettings>().grace.count() / 1000.0);
         return std::string(text);
       }},
      {{"PLAIT_BIND", "auto|core|none", "none",
        "plait run: bind rank i to the i-th CPU it may use (core), or only when there are at "
        "least as many CPUs as ranks (auto), or not (none)", true},
       [](Config& c, const std::string& n, const std::string& v) {
         if (v != "auto" && v != "core" && v != "none") reject(n, v, "auto, core or none");
         c.get<LauncherSettings>().bind = v;
       },
       [](const Config& c, const std::string&) { return c.get<LauncherSettings>().bind; }},
  };
}

}  // namespace

const size_t LauncherSettings::settings_index = register_settings<LauncherSettings>("launcher", rows);

}  // namespace plait::cli
