#pragma once

#include "transport/fabric.h"

namespace plait::transport {

Capabilities ucx_capabilities();

}  // namespace plait::transport
