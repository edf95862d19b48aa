// The programs in examples/ run as documented: under `plait run`, with the results they print.
#include <gtest/gtest.h>

#include <string>

#include "support/job.h"

namespace plait::testing {
namespace {

// build/tools/plait/plait -> build/examples/<name>
std::string example(const std::string& name) {
  std::string bin = plait_bin();
  return bin.substr(0, bin.rfind("/tools/plait/")) + "/examples/" + name;
}

TEST(Examples, AllreduceAveragesAcrossRanks) {
  JobResult r = run_command({plait_bin(), "run", "-n", "3", "--", example("allreduce_example")},
                            {}, 120);
  ASSERT_EQ(r.status, 0) << r.output;
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_NE(r.output.find("rank " + std::to_string(rank) + " of 3: mean 1 via"),
              std::string::npos) << r.output;
}

}  // namespace
}  // namespace plait::testing
