// The options `plait bench -n` and `plait tune -n` start their ranks with: the environment's
// PLAIT_BIND and PLAIT_RUN_GRACE_S, as `plait run` reads them (bench -n once ignored
// PLAIT_BIND, so bench/compare_peers.sh ran plait unbound while it said it bound it).
#include <gtest/gtest.h>
#include <stdlib.h>

#include "plait/run/local_job.h"

namespace plait::cli {
namespace {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() { had_ ? ::setenv(name_, old_.c_str(), 1) : ::unsetenv(name_); }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(LocalJobFromEnv, TakesBindAndGraceFromTheEnvironment) {
  {
    ScopedEnv bind("PLAIT_BIND", "core");
    ScopedEnv grace("PLAIT_RUN_GRACE_S", "1500ms");
    const LocalJobOptions o = local_job_from_env(2, {"true"});
    EXPECT_EQ(o.nranks, 2);
    EXPECT_EQ(o.bind, "core");
    EXPECT_EQ(o.grace, std::chrono::milliseconds(1500));
    // Rank 0 gets the first CPU this process may use.
    EXPECT_GE(plan_binding(o.bind, o.nranks).at(0), 0);
  }
  ScopedEnv none("PLAIT_BIND", "none");
  EXPECT_EQ(local_job_from_env(2, {"true"}).bind, "none");
  EXPECT_EQ(plan_binding("none", 2), std::vector<int>(2, -1));
}

}  // namespace
}  // namespace plait::cli
