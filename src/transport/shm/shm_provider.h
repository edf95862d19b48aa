// The shm provider's entry points beyond create_shm_fabric() (declared in fabric.h).
#pragma once

#include "core/config.h"
#include "transport/fabric.h"

namespace plait::transport {

Capabilities shm_capabilities(const Config& config);

}  // namespace plait::transport
