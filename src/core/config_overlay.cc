#include "core/config_overlay.h"

#include <algorithm>
#include <iterator>
#include <string_view>
#include <vector>

#include "plait/error.h"

extern char** environ;

namespace plait {

Config config_with_settings(const std::map<std::string, std::string>& settings,
                            std::string_view owner, std::string_view object,
                            const ErrorContext& ctx) {
  const std::string who(owner);
  const std::vector<SettingInfo>& known = plait::settings();
  for (const auto& [name, value] : settings) {
    const auto row = std::find_if(known.begin(), known.end(),
                                  [&](const SettingInfo& s) { return s.name == name; });
    if (row == known.end())
      throw invalid_usage(who + ": '" + name +
                              "' is not a plait setting (`plait info` lists them)",
                          ctx);
    // Read by the logger, the launcher or the store server once, before any object exists:
    // given in code they would do nothing, so they are refused.
    if (row->process_wide)
      throw invalid_usage(who + ": " + name +
                              " applies to the whole process or the launcher, not to one " +
                              std::string(object) + "; set it in the environment",
                          ctx);
  }
  // The caller's values alone first, so that a bad one is reported as coming from code.
  try {
    Config::from_env(settings);
  } catch (const Error& e) {
    throw invalid_usage(who + ": " + e.message(), ctx);
  }
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    const size_t eq = text.find('=');
    if (text.starts_with("PLAIT_") && eq != std::string_view::npos)
      env.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  for (const auto& [name, value] : settings) env[name] = value;
  return Config::from_env(env);
}

}  // namespace plait
