// plait::Error as Python sees it: plait.Error and one subclass per category (InvalidUsageError,
// TimeoutError, ...), carrying the same message and context (rank, peer, op).
#pragma once

#include <pybind11/pybind11.h>

namespace plait::python {

// Adds the exception classes to `m` and translates every plait::Error that reaches Python.
void register_errors(pybind11::module_& m);

}  // namespace plait::python
