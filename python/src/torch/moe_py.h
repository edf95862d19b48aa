// plait.torch.moe's native classes (MoeDispatcher, MoeCall, MoeHandle) in _plait_torch.
#pragma once

#include <pybind11/pybind11.h>

namespace plait::torch_backend {

void bind_moe(pybind11::module_& m);

}  // namespace plait::torch_backend
