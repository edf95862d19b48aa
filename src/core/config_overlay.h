// A Config from the process environment's PLAIT_* variables with settings given in code laid
// over them (CommunicatorOptions::settings, rdma::FabricOptions::settings, ...), checked by
// the one registry so that code and environment accept exactly the same names and values.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "core/config.h"
#include "plait/error.h"

namespace plait {

// `owner` names the options struct in errors ("CommunicatorOptions::settings"), `object` what
// they configure ("communicator"), `context` the call. Throws
// Error(kInvalidUsage) for an unknown name, a value that does not parse, or a setting of the
// process or the launcher rather than of one object (PLAIT_LOG, PLAIT_BIND, ...).
Config config_with_settings(const std::map<std::string, std::string>& settings,
                            std::string_view owner, std::string_view object,
                            const ErrorContext& context);

}  // namespace plait
