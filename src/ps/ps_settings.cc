#include "ps/ps_settings.h"

#include <cstdio>
#include <limits>
#include <string_view>
#include <vector>

#include "core/setting_parsers.h"
#include "core/settings_registry.h"
#include "plait/error.h"

namespace plait::ps {
namespace {

std::vector<SettingRow> rows() {
  return {
      {{"PLAIT_PS_SERVERS", "int: >= 1", "1",
        "Parameter server: how many ranks are servers (ps::Options::servers overrides it)"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.get<PsSettings>().servers = static_cast<int>(parse_int_in(n, v, 1, std::numeric_limits<int>::max()));
       },
       [](const Config& c, const std::string&) { return std::to_string(c.get<PsSettings>().servers); }},
      {{"PLAIT_PS_PARTITION", "bytes: 4K..1G", "4M",
        "Parameter server: keys larger than this are split into partitions spread over the servers"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.get<PsSettings>().partition_bytes = parse_bytes_setting(n, v, 4096);
         if (c.get<PsSettings>().partition_bytes > (size_t{1} << 30)) reject(n, v, "bytes: 4K..1G");
       },
       [](const Config& c, const std::string&) { return format_bytes(c.get<PsSettings>().partition_bytes); }},
      {{"PLAIT_PS_CHUNK", "bytes: 4K..1G", "256K",
        "Parameter server: what one push, reply or ring slot carries at most (a partition is cut into chunks)"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.get<PsSettings>().chunk_bytes = parse_bytes_setting(n, v, 4096);
         if (c.get<PsSettings>().chunk_bytes > (size_t{1} << 30)) reject(n, v, "bytes: 4K..1G");
       },
       [](const Config& c, const std::string&) { return format_bytes(c.get<PsSettings>().chunk_bytes); }},
      {{"PLAIT_PS_SLOTS", "int: 1..1024", "8",
        "Parameter server: ring-buffer slots (one partition each) per worker on each server"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.get<PsSettings>().slots = static_cast<int>(parse_int_in(n, v, 1, 1024));
       },
       [](const Config& c, const std::string&) { return std::to_string(c.get<PsSettings>().slots); }},
      {{"PLAIT_PS_WINDOW", "bytes: 0, or 4K..1G", "2M",
        "Parameter server: push bytes a worker keeps on the wire at once, over all servers (0: only the slots limit)"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.get<PsSettings>().window_bytes = v == "0" ? 0 : parse_bytes_setting(n, v, 4096);
         if (c.get<PsSettings>().window_bytes > (size_t{1} << 30)) reject(n, v, "bytes: 0, or 4K..1G");
       },
       [](const Config& c, const std::string&) { return format_bytes(c.get<PsSettings>().window_bytes); }},
      {{"PLAIT_PS_WAIT", enum_type(kWaitPolicyNames), "hybrid",
        "Parameter server: how its completion threads wait (busy-poll, sleep, or spin then sleep)"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.get<PsSettings>().wait = static_cast<WaitPolicy>(parse_choice(n, v, kWaitPolicyNames));
       },
       [](const Config& c, const std::string&) {
         return std::string(kWaitPolicyNames[static_cast<size_t>(c.get<PsSettings>().wait)]);
       }},
  };
}

}  // namespace

const size_t PsSettings::settings_index = register_settings<PsSettings>("ps", rows);

}  // namespace plait::ps
