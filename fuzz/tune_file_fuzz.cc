// The tune file (transport/tuned_costs.h) that `plait tune` writes and every fabric setup
// reads from disk (rank 0 reads it and hands the text to the others through the store): the
// input is the file's text.
//
// Beyond "no crash": what parses must come back identical through format_tuned_costs(), the
// writer, and a second parse (a file plait writes is one plait reads the same way).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_support.h"
#include "plait/error.h"
#include "transport/tuned_costs.h"

using namespace plait::transport;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  TunedCosts costs;
  try {
    costs = parse_tuned_costs(text, "tune.conf");
  } catch (const plait::Error& e) {
    PLAIT_FUZZ_CHECK(e.category() == plait::ErrorCategory::kInvalidUsage);
    return 0;
  }
  const std::string written = format_tuned_costs(costs, "fuzz\nround trip");
  TunedCosts again;
  try {
    again = parse_tuned_costs(written, "written");
  } catch (const plait::Error& e) {
    std::fprintf(stderr, "the writer's output does not parse: %s\n%s", e.what(), written.c_str());
    std::abort();
  }
  PLAIT_FUZZ_CHECK(again.values() == costs.values());
  // What the fabric setup does with them.
  CostModel defaults;
  for (std::string_view provider : {"tcp", "shm"}) (void)apply_tuned(defaults, again, provider);
  return 0;
}
