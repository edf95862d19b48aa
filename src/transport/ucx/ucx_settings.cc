#include "transport/ucx/ucx_settings.h"

#include <cstdio>
#include <limits>
#include <string_view>
#include <vector>

#include "core/setting_parsers.h"
#include "core/settings_registry.h"
#include "plait/error.h"

namespace plait::transport {
namespace {

std::vector<SettingRow> rows() {
  return {
      {{"PLAIT_UCX_TLS", "string", "",
        "Transports the ucx provider may use (UCX_TLS syntax: rc,sm / tcp / ^ud); empty = UCX_TLS or all"},
       [](Config& c, const std::string&, const std::string& v) { c.get<UcxSettings>().tls = trim(v); },
       [](const Config& c, const std::string&) { return c.get<UcxSettings>().tls; }},
  };
}

}  // namespace

const size_t UcxSettings::settings_index = register_settings<UcxSettings>("ucx", rows);

}  // namespace plait::transport
