// `plait run --max-restarts K`: a job whose rank fails is started again, every rank, up to K
// times, and the ranks see which start it is; success, a timeout or a command that cannot
// start is never restarted. `plait run --enable-recovery`: a failed rank is reported and the
// others go on.
#include <gtest/gtest.h>

#include <string>

#include "support/job.h"

namespace plait::testing {
namespace {

JobResult plait_run(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {plait_bin(), "run"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, {}, 120);
}

TEST(LauncherRestart, AFailedJobStartsAgainUntilItSucceeds) {
  // Rank 1 fails on the first two starts; the third finishes.
  JobResult r = plait_run({"-n", "2", "--max-restarts", "3", "sh", "-c",
                           "echo start $PLAIT_RESTART_COUNT $TORCHELASTIC_RESTART_COUNT of $TORCHELASTIC_MAX_RESTARTS; "
                           "if [ \"$RANK\" = 1 ] && [ \"$PLAIT_RESTART_COUNT\" -lt 2 ]; then exit 5; fi; sleep 0.2"});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("plait run: restarting every rank (restart 1 of 3)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("plait run: restarting every rank (restart 2 of 3)"), std::string::npos) << r.output;
  EXPECT_EQ(count_of(r.output, "restarting every rank"), 2u) << r.output;
  EXPECT_EQ(count_of(r.output, "exited with status 5"), 2u) << r.output;
  EXPECT_NE(r.output.find("[0] start 2 2 of 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[1] start 2 2 of 3"), std::string::npos) << r.output;
}

TEST(LauncherRestart, GivesUpAfterTheLastRestartWithTheRanksStatus) {
  JobResult r = plait_run({"-n", "2", "--max-restarts", "1", "sh", "-c",
                           "if [ \"$RANK\" = 1 ]; then exit 7; fi; sleep 30"});
  EXPECT_EQ(r.status, 7) << r.output;
  EXPECT_EQ(count_of(r.output, "restarting every rank (restart 1 of 1)"), 1u) << r.output;
  EXPECT_NE(r.output.find("plait run: giving up after 1 restart\n"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 25) << "the sleeping rank was stopped each time";
}

TEST(LauncherRestart, SuccessTimeoutsAndMissingCommandsAreNotRestarted) {
  JobResult ok = plait_run({"-n", "2", "--max-restarts", "2", "sh", "-c", "echo start $PLAIT_RESTART_COUNT"});
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_EQ(count_of(ok.output, "start 0"), 2u) << ok.output;
  JobResult late = plait_run({"-n", "2", "--max-restarts", "2", "--timeout", "0.5", "sleep", "60"});
  EXPECT_EQ(late.status, 124) << late.output;
  JobResult missing = plait_run({"-n", "2", "--max-restarts", "2", "plait-test-no-such-command"});
  EXPECT_EQ(missing.status, 127) << missing.output;
  for (const JobResult* r : {&ok, &late, &missing})
    EXPECT_EQ(r->output.find("restarting"), std::string::npos) << r->output;
  JobResult bad = plait_run({"-n", "2", "--max-restarts", "-1", "true"});
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("--max-restarts needs a number from 0 to 1000, not '-1'"), std::string::npos)
      << bad.output;
}

TEST(LauncherRecovery, AFailedRankIsReportedAndTheOthersFinish) {
  JobResult r = plait_run({"-n", "3", "--enable-recovery", "sh", "-c",
                           "if [ \"$RANK\" = 1 ]; then exit 5; fi; sleep 0.5; echo done"});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("exited with status 5; the other 2 ranks go on (--enable-recovery)"),
            std::string::npos) << r.output;
  EXPECT_EQ(count_of(r.output, "done"), 2u) << r.output;
}

TEST(LauncherRecovery, WhenNoRankSucceedsTheStatusIsTheFirstFailures) {
  JobResult r = plait_run({"-n", "2", "--enable-recovery", "sh", "-c",
                           "if [ \"$RANK\" = 1 ]; then exit 6; fi; sleep 0.5; exit 9"});
  EXPECT_EQ(r.status, 6) << r.output;
  EXPECT_EQ(count_of(r.output, "go on (--enable-recovery)"), 1u) << r.output;
}

}  // namespace
}  // namespace plait::testing
