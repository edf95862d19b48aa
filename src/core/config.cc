// The PLAIT_* registry: the general rows (core_settings.cc) and the sections layers register,
// each row a name, type, default, doc, and how its text becomes a value in a Config and back.
// Nothing here caches a value: every from_env() reads the environment afresh into a Config
// that its owner keeps.
#include "core/config.h"

#include <algorithm>
#include <string_view>

#include "core/setting_parsers.h"
#include "core/settings_registry.h"
#include "plait/error.h"

extern char** environ;

namespace plait {
namespace {

struct Section {
  std::string name;
  std::vector<SettingRow> (*rows)();
  std::any (*make_default)();
};

// Filled during static initialisation (register_settings_section), read after it.
std::vector<Section>& sections() {
  static std::vector<Section> registered;
  return registered;
}

// Immutable metadata built once, on first use after static initialisation; values never
// live here.
const std::vector<SettingRow>& rows() {
  static const std::vector<SettingRow> table = [] {
    std::vector<SettingRow> out = core_setting_rows();
    std::vector<const Section*> by_name;
    for (const Section& s : sections()) by_name.push_back(&s);
    std::sort(by_name.begin(), by_name.end(),
              [](const Section* a, const Section* b) { return a->name < b->name; });
    for (const Section* s : by_name) {
      std::vector<SettingRow> more = s->rows();
      out.insert(out.end(), more.begin(), more.end());
    }
    return out;
  }();
  return table;
}

const SettingRow* find_row(const std::string& name) {
  for (const SettingRow& row : rows()) {
    if (row.info.name == name) return &row;
  }
  return nullptr;
}

}  // namespace

size_t register_settings_section(std::string_view name, std::vector<SettingRow> (*rows)(),
                                 std::any (*make_default)()) {
  sections().push_back({std::string(name), rows, make_default});
  return sections().size() - 1;
}

Config::Config() {
  sections_.reserve(sections().size());
  for (const Section& s : sections()) sections_.push_back(s.make_default());
}

Config Config::from_env(const std::map<std::string, std::string>& env) {
  Config config;
  for (const SettingRow& row : rows()) {
    auto it = env.find(row.info.name);
    // An empty variable counts as unset, as `PLAIT_X= cmd` in a shell usually intends.
    if (it == env.end() || trim(it->second).empty()) continue;
    row.parse(config, row.info.name, it->second);
  }
  return config;
}

Config Config::from_env() {
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    if (!text.starts_with("PLAIT_")) continue;
    size_t eq = text.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return from_env(env);
}

std::chrono::milliseconds effective_peer_timeout(const Config& config) {
  using std::chrono::milliseconds;
  if (config.keepalive.count() == 0) return milliseconds(0);
  // Fewer than a few periods would fail a live peer whose keep-alive was merely late (a
  // starved progress thread); more than a minute leaves a stopped host unnoticed for long.
  if (config.peer_timeout.count() != 0) return std::max(config.peer_timeout, 2 * config.keepalive);
  return std::max(std::min(config.timeout, milliseconds(60000)), 5 * config.keepalive);
}

std::chrono::milliseconds effective_stall_warn(const Config& config,
                                               std::chrono::milliseconds timeout) {
  using std::chrono::milliseconds;
  if (config.stall_warn.count() >= 0) return config.stall_warn;
  return std::clamp(timeout / 4, milliseconds(1000), milliseconds(60000));
}

const std::vector<SettingInfo>& settings() {
  static const std::vector<SettingInfo> infos = [] {
    std::vector<SettingInfo> out;
    for (const SettingRow& row : rows()) out.push_back(row.info);
    return out;
  }();
  return infos;
}

std::string setting_value(const Config& config, const std::string& name) {
  const SettingRow* row = find_row(name);
  if (row == nullptr) throw invalid_usage("unknown setting '" + name + "'", {.op = "config"});
  return row->show(config, name);
}

}  // namespace plait
