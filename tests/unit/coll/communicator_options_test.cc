// CommunicatorOptions::settings: PLAIT_* settings given in code, over the environment, checked
// by the same registry as the environment's. One rank over an in-process store; the
// multi-rank side (algorithms, inheritance by split and subgroup) is in
// tests/multiproc/coll/communicator_settings_test.cc.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <optional>
#include <string>

#include "plait/plait.h"

namespace plait {
namespace {

using namespace std::chrono_literals;

Bootstrap single_rank() {
  Bootstrap b;
  b.rank = 0;
  b.size = 1;
  b.store = make_hash_store();
  return b;
}

// Sets a variable for one test and restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The message create() throws for `settings`, or "" when it does not throw.
std::string refusal(const std::map<std::string, std::string>& settings) {
  try {
    Communicator::create(single_rank(), {.settings = settings});
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage) << e.what();
    return e.what();
  }
  return "";
}

TEST(CommunicatorSettings, ASettingFromCodeWinsOverTheEnvironment) {
  ScopedEnv env("PLAIT_TIMEOUT", "9000");
  EXPECT_EQ(Communicator::create(single_rank())->timeout(), 9000ms);
  EXPECT_EQ(Communicator::create(single_rank(), {.settings = {{"PLAIT_TIMEOUT", "7s"}}})->timeout(),
            7000ms);
  // An empty value stands for the built-in default, as an empty variable does.
  EXPECT_EQ(Communicator::create(single_rank(), {.settings = {{"PLAIT_TIMEOUT", ""}}})->timeout(),
            300000ms);
  // The explicit option is the most specific of the three.
  EXPECT_EQ(Communicator::create(single_rank(),
                                 {.timeout = 5s, .settings = {{"PLAIT_TIMEOUT", "7s"}}})
                ->timeout(),
            5000ms);
}

TEST(CommunicatorSettings, AnAlgorithmForcedInCodeRuns) {
  auto comm = Communicator::create(single_rank(),
                                   {.settings = {{"PLAIT_ALGO_ALLREDUCE", "recursive_doubling"}}});
  float x = 1;
  WorkPtr work = comm->allreduce(&x, &x, 1, DataType::kF32, ReduceOp::kSum);
  work->wait();
  EXPECT_EQ(work->algorithm(), "recursive_doubling");
  EXPECT_EQ(x, 1.0f);
}

TEST(CommunicatorSettings, AnUnknownNameIsRefusedByName) {
  EXPECT_EQ(refusal({{"PLAIT_TRANSPROT", "tcp"}}),
            "rank 0: create communicator: CommunicatorOptions::settings: 'PLAIT_TRANSPROT' is not "
            "a plait setting (`plait info` lists them) [invalid usage]");
}

TEST(CommunicatorSettings, ABadValueIsRefusedWithTheAcceptedOnes) {
  // The registry words the rest (config.cc); this message only says the value came from code.
  const std::string transport = refusal({{"PLAIT_TRANSPORT", "pigeon"}});
  EXPECT_EQ(transport.rfind("rank 0: create communicator: CommunicatorOptions::settings: "
                            "PLAIT_TRANSPORT='pigeon' is not valid: ",
                            0),
            0u)
      << transport;
  EXPECT_NE(transport.find("auto|tcp|shm"), std::string::npos) << transport;
  const std::string algo = refusal({{"PLAIT_ALGO_ALLREDUCE", "fastest"}});
  EXPECT_NE(algo.find("CommunicatorOptions::settings: PLAIT_ALGO_ALLREDUCE='fastest' is not valid"),
            std::string::npos)
      << algo;
}

TEST(CommunicatorSettings, ProcessWideSettingsAreRefused) {
  for (const char* name : {"PLAIT_LOG", "PLAIT_RUN_GRACE_S", "PLAIT_BIND", "PLAIT_STORE_MAX_HANDSHAKES"}) {
    EXPECT_EQ(refusal({{name, "1"}}),
              std::string("rank 0: create communicator: CommunicatorOptions::settings: ") + name +
                  " applies to the whole process or the launcher, not to one communicator; set "
                  "it in the environment [invalid usage]");
  }
}

}  // namespace
}  // namespace plait
