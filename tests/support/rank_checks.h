// Checks inside a rank program of a multi-process test: a failed check prints one FAIL line
// (which the parent test shows) and makes the rank exit 1.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#define CHECK_OR_FAIL(cond, ...)         \
  do {                                   \
    if (!(cond)) {                       \
      std::printf("FAIL: " __VA_ARGS__); \
      std::printf("\n");                 \
      std::fflush(stdout);               \
      return 1;                          \
    }                                    \
  } while (0)

namespace plait::testing {

// PLAIT_TEST_HOSTS=h puts rank r on simulated host r % h (PLAIT_HOST_ID): shm within a host,
// tcp between hosts.
inline void simulate_hosts() {
  if (const char* hosts = std::getenv("PLAIT_TEST_HOSTS")) {
    const char* rank = std::getenv("RANK");
    std::string id = "h" + std::to_string(std::atoi(rank ? rank : "0") % std::atoi(hosts));
    ::setenv("PLAIT_HOST_ID", id.c_str(), 1);
  }
}

}  // namespace plait::testing
