// The TCP provider's entry points beyond create_tcp_fabric() (declared in fabric.h).
#pragma once

#include "core/config.h"
#include "transport/fabric.h"

namespace plait::transport {

Capabilities tcp_capabilities(const Config& config);

}  // namespace plait::transport
