#include "transport/tcp/tcp_settings.h"

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
      {{"PLAIT_TCP_INTEGRITY", "0 | 1", "0",
        "1: every tcp frame carries AES-GMAC tags, so that data altered on the wire is an "
        "error naming the peer; every rank must set it alike"},
       [](Config& c, const std::string& n, const std::string& v) {
         const std::string t = lower(trim(v));
         if (t == "1" || t == "on" || t == "true") c.get<TcpSettings>().integrity = true;
         else if (t == "0" || t == "off" || t == "false") c.get<TcpSettings>().integrity = false;
         else reject(n, v, "0 or 1");
       },
       [](const Config& c, const std::string&) { return std::string(c.get<TcpSettings>().integrity ? "1" : "0"); }},
      {{"PLAIT_TCP_STREAMS", "int: 1..64", "2",
        "TCP sockets per peer; large messages are striped across them"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.get<TcpSettings>().streams = static_cast<int>(parse_int_in(n, v, 1, 64));
       },
       [](const Config& c, const std::string&) { return std::to_string(c.get<TcpSettings>().streams); }},
      {{"PLAIT_TCP_STRIPE", "bytes", "256K",
        "Striping unit across a peer's TCP sockets (K/M/G are binary multiples)"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.get<TcpSettings>().stripe_bytes = parse_bytes_setting(n, v, 1);
       },
       [](const Config& c, const std::string&) { return format_bytes(c.get<TcpSettings>().stripe_bytes); }},
      {{"PLAIT_TCP_NOTSENT_LOWAT", "bytes", "128K",
        "Unsent bytes the kernel holds per TCP socket before plait's queue takes over (replies "
        "overtake queued data only there); 0 = the kernel's default"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.get<TcpSettings>().notsent_lowat = parse_bytes_setting(n, v, 0);
       },
       [](const Config& c, const std::string&) { return format_bytes(c.get<TcpSettings>().notsent_lowat); }},
      {{"PLAIT_TCP_IFNAME", "string", "",
        "Interface name or local address the TCP provider binds to; empty = automatic"},
       [](Config& c, const std::string&, const std::string& v) { c.get<TcpSettings>().interface = trim(v); },
       [](const Config& c, const std::string&) { return c.get<TcpSettings>().interface; }},
  };
}

}  // namespace

const size_t TcpSettings::settings_index = register_settings<TcpSettings>("tcp", rows);

}  // namespace plait::transport
