// Random values from the OS, and the hex text that names and tags made of them travel as.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace plait {

// A random 64-bit value from the OS.
uint64_t random_u64();

// Lower-case hex of `n` bytes.
std::string hex(const uint8_t* bytes, size_t n);

}  // namespace plait
