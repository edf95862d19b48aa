// One element of a typed buffer as a double, for tests, checks and tools (not a hot path).
#pragma once

#include <cstddef>

#include "plait/types.h"

namespace plait {

// Stores `value` converted to dtype (f16/bf16 rounded to nearest even, integers truncated).
void store_element(DataType dtype, void* base, size_t i, double value);
double load_element(DataType dtype, const void* base, size_t i);

}  // namespace plait
