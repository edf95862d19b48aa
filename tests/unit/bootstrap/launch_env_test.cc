#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <future>
#include <thread>

#include "plait/bootstrap.h"
#include "plait/error.h"

namespace plait {
namespace {

using namespace std::chrono_literals;
using Env = std::map<std::string, std::string>;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The message of the kInvalidUsage error detect_launch_env throws for `env`.
std::string detect_error(const Env& env) {
  try {
    detect_launch_env(env);
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "detect_launch_env accepted the environment";
  return "";
}

Env merged(Env a, const Env& b) {
  a.insert(b.begin(), b.end());
  return a;
}

const Env kPlait = {{"PLAIT_RANK", "2"},
                    {"PLAIT_WORLD_SIZE", "4"},
                    {"PLAIT_LOCAL_RANK", "2"},
                    {"PLAIT_LOCAL_SIZE", "4"},
                    {"PLAIT_STORE_ADDR", "127.0.0.1:29400"},
                    {"PLAIT_JOB_TOKEN", "tok"}};
const Env kTorchrun = {{"RANK", "5"},
                       {"WORLD_SIZE", "8"},
                       {"LOCAL_RANK", "1"},
                       {"LOCAL_WORLD_SIZE", "4"},
                       {"MASTER_ADDR", "node0"},
                       {"MASTER_PORT", "29500"}};
const Env kOpenMpi = {{"OMPI_COMM_WORLD_RANK", "3"},
                      {"OMPI_COMM_WORLD_SIZE", "6"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}};
const Env kMpich = {
    {"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}};
const Env kSlurm = {{"SLURM_PROCID", "6"},
                    {"SLURM_NTASKS", "7"},
                    {"SLURM_LOCALID", "0"},
                    {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                    {"SLURM_NODEID", "3"}};
const Env kStoreAddr = {{"PLAIT_STORE_ADDR", "store-host:1234"}};

TEST(LaunchEnv, NoLauncherIsAOneRankJob) {
  LaunchEnv env = detect_launch_env({{"MASTER_ADDR", "leftover"}, {"MASTER_PORT", "1"}});
  EXPECT_EQ(env.launcher, Launcher::kNone);
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.size, 1);
  EXPECT_EQ(env.local_size, 1);
  EXPECT_TRUE(env.store_host.empty());
  EXPECT_FALSE(env.host_store);
}

TEST(LaunchEnv, Plait) {
  LaunchEnv env = detect_launch_env(kPlait);
  EXPECT_EQ(env.launcher, Launcher::kPlait);
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.size, 4);
  EXPECT_EQ(env.local_rank, 2);
  EXPECT_EQ(env.local_size, 4);
  EXPECT_EQ(env.store_host, "127.0.0.1");
  EXPECT_EQ(env.store_port, 29400);
  EXPECT_FALSE(env.host_store);
  EXPECT_EQ(env.job_token, "tok");
}

TEST(LaunchEnv, TorchrunStoreSitsNextToMasterPortOnRankZero) {
  LaunchEnv env = detect_launch_env(kTorchrun);
  EXPECT_EQ(env.launcher, Launcher::kTorchrun);
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_size, 4);
  EXPECT_EQ(env.store_host, "node0");
  EXPECT_EQ(env.store_port, 29501);
  EXPECT_FALSE(env.host_store);

  Env rank0 = kTorchrun;
  rank0["RANK"] = "0";
  rank0["LOCAL_RANK"] = "0";
  EXPECT_TRUE(detect_launch_env(rank0).host_store);
  rank0["PLAIT_STORE_PORT"] = "40000";
  EXPECT_EQ(detect_launch_env(rank0).store_port, 40000);
}

TEST(LaunchEnv, OpenMpi) {
  LaunchEnv env = detect_launch_env(merged(kOpenMpi, kStoreAddr));
  EXPECT_EQ(env.launcher, Launcher::kOpenMpi);
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.size, 6);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.local_size, 3);
  EXPECT_EQ(env.store_host, "store-host");
  EXPECT_EQ(env.store_port, 1234);
}

TEST(LaunchEnv, Mpich) {
  LaunchEnv env = detect_launch_env(merged(kMpich, kStoreAddr));
  EXPECT_EQ(env.launcher, Launcher::kMpich);
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.size, 2);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_size, 2);
}

TEST(LaunchEnv, SlurmLocalSizeFollowsThisNodesTaskCount) {
  LaunchEnv env = detect_launch_env(merged(kSlurm, kStoreAddr));
  EXPECT_EQ(env.launcher, Launcher::kSlurm);
  EXPECT_EQ(env.rank, 6);
  EXPECT_EQ(env.size, 7);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.local_size, 1);  // node 3 of "2(x3),1"

  Env other = merged(kSlurm, kStoreAddr);
  other["SLURM_PROCID"] = "2";
  other["SLURM_LOCALID"] = "1";
  other["SLURM_NODEID"] = "1";
  EXPECT_EQ(detect_launch_env(other).local_size, 2);
  other.erase("SLURM_NODEID");
  EXPECT_EQ(detect_launch_env(other).local_size, 2);  // the first number
  other["SLURM_NTASKS_PER_NODE"] = "3";
  EXPECT_EQ(detect_launch_env(other).local_size, 3);  // preferred when set
}

TEST(LaunchEnv, SrunWithPmi2IsSlurmNotMpich) {
  // Slurm's PMI-2 plugin sets PMI_RANK/PMI_SIZE, but no Hydra local-rank variables.
  Env env = merged(merged(kSlurm, kStoreAddr), {{"PMI_RANK", "6"}, {"PMI_SIZE", "7"}});
  EXPECT_EQ(detect_launch_env(env).launcher, Launcher::kSlurm);
}

TEST(LaunchEnv, LauncherPrecedence) {
  Env all = merged(merged(merged(merged(kPlait, kTorchrun), kOpenMpi), kMpich), kSlurm);
  EXPECT_EQ(detect_launch_env(all).launcher, Launcher::kPlait);
  Env no_plait = merged(merged(merged(kTorchrun, kOpenMpi), kMpich), merged(kSlurm, kStoreAddr));
  EXPECT_EQ(detect_launch_env(no_plait).launcher, Launcher::kTorchrun);
  Env mpi = merged(merged(kOpenMpi, kMpich), merged(kSlurm, kStoreAddr));
  EXPECT_EQ(detect_launch_env(mpi).launcher, Launcher::kOpenMpi);
  Env mpich = merged(kMpich, merged(kSlurm, kStoreAddr));
  EXPECT_EQ(detect_launch_env(mpich).launcher, Launcher::kMpich);
}

TEST(LaunchEnv, StoreLocationPrecedence) {
  Env env = merged(kTorchrun, {{"PLAIT_STORE_PATH", "/shared/rdv"}, {"PLAIT_STORE_ADDR", "h:1"}});
  LaunchEnv path = detect_launch_env(env);
  EXPECT_EQ(path.store_path, "/shared/rdv");
  EXPECT_TRUE(path.store_host.empty());

  env.erase("PLAIT_STORE_PATH");
  LaunchEnv addr = detect_launch_env(env);
  EXPECT_EQ(addr.store_host, "h");
  EXPECT_EQ(addr.store_port, 1);
  EXPECT_FALSE(addr.host_store);  // `plait run` serves it, not rank 0

  LaunchEnv v6 = detect_launch_env(merged(kOpenMpi, {{"PLAIT_STORE_ADDR", "[fe80::1]:7000"}}));
  EXPECT_EQ(v6.store_host, "fe80::1");
  EXPECT_EQ(v6.store_port, 7000);
}

TEST(LaunchEnv, OneRankMpiJobNeedsNoStore) {
  LaunchEnv env = detect_launch_env({{"OMPI_COMM_WORLD_RANK", "0"},
                                     {"OMPI_COMM_WORLD_SIZE", "1"},
                                     {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}});
  EXPECT_EQ(env.launcher, Launcher::kOpenMpi);
  EXPECT_TRUE(env.store_host.empty());
  EXPECT_TRUE(env.store_path.empty());
}

TEST(LaunchEnv, MissingStoreGivesAHint) {
  for (const Env& env : {kOpenMpi, kMpich, kSlurm}) {
    std::string msg = detect_error(env);
    EXPECT_TRUE(contains(msg, "no rendezvous store")) << msg;
    EXPECT_TRUE(contains(msg, "PLAIT_STORE_ADDR")) << msg;
    EXPECT_TRUE(contains(msg, "MASTER_ADDR and MASTER_PORT")) << msg;
    EXPECT_TRUE(contains(msg, "PLAIT_STORE_PATH")) << msg;
  }
}

TEST(LaunchEnv, ErrorsNameTheVariable) {
  Env env = kTorchrun;
  env.erase("LOCAL_RANK");
  EXPECT_TRUE(contains(detect_error(env), "LOCAL_RANK is not set")) << detect_error(env);

  env = kTorchrun;
  env["WORLD_SIZE"] = "eight";
  EXPECT_TRUE(contains(detect_error(env), "WORLD_SIZE='eight'"));

  env = kTorchrun;
  env["RANK"] = "-1";
  EXPECT_TRUE(contains(detect_error(env), "RANK='-1' is not a non-negative integer"));

  env = kTorchrun;
  env["RANK"] = "8";
  EXPECT_TRUE(contains(detect_error(env), "RANK=8 is not below WORLD_SIZE=8"));

  env = kTorchrun;
  env["LOCAL_RANK"] = "4";
  EXPECT_TRUE(contains(detect_error(env), "LOCAL_RANK=4"));

  env = kTorchrun;
  env["WORLD_SIZE"] = "0";
  EXPECT_TRUE(contains(detect_error(env), "WORLD_SIZE=0"));

  env = kTorchrun;
  env.erase("MASTER_PORT");
  EXPECT_TRUE(contains(detect_error(env), "MASTER_PORT is not"));

  env = kTorchrun;
  env["MASTER_PORT"] = "65535";
  EXPECT_TRUE(contains(detect_error(env), "PLAIT_STORE_PORT"));

  env = kTorchrun;
  env["PLAIT_STORE_PORT"] = "99999";
  EXPECT_TRUE(contains(detect_error(env), "PLAIT_STORE_PORT='99999'"));

  for (const char* bad : {"no-port", "host:", ":80", "host:http", "::1:80", "[::1:80"}) {
    Env e = merged(kOpenMpi, {{"PLAIT_STORE_ADDR", bad}});
    EXPECT_TRUE(contains(detect_error(e), "PLAIT_STORE_ADDR")) << bad;
  }

  env = merged(kSlurm, kStoreAddr);
  env["SLURM_TASKS_PER_NODE"] = "2(x";
  EXPECT_TRUE(contains(detect_error(env), "SLURM_TASKS_PER_NODE='2(x'"));
  env.erase("SLURM_TASKS_PER_NODE");
  EXPECT_TRUE(contains(detect_error(env), "SLURM_TASKS_PER_NODE"));

  Env plait = kPlait;
  plait.erase("PLAIT_LOCAL_SIZE");
  EXPECT_TRUE(contains(detect_error(plait), "PLAIT_LOCAL_SIZE is not set"));
}

TEST(LaunchEnv, LauncherNames) {
  EXPECT_EQ(to_string(Launcher::kPlait), "plait");
  EXPECT_EQ(to_string(Launcher::kTorchrun), "torchrun");
  EXPECT_EQ(to_string(Launcher::kOpenMpi), "Open MPI");
  EXPECT_EQ(to_string(Launcher::kMpich), "MPICH/Hydra");
  EXPECT_EQ(to_string(Launcher::kSlurm), "Slurm");
  EXPECT_EQ(to_string(Launcher::kNone), "none");
}

TEST(LaunchEnv, EnvironMapReadsTheProcessEnvironment) {
  ::setenv("PLAIT_TEST_ENVIRON_MAP", "a=b", 1);
  Env env = environ_map();
  ::unsetenv("PLAIT_TEST_ENVIRON_MAP");
  EXPECT_EQ(env["PLAIT_TEST_ENVIRON_MAP"], "a=b");
}

TEST(Bootstrap, NoLauncherGetsAnInProcessStore) {
  Bootstrap b = bootstrap_from(LaunchEnv{}, 1s);
  EXPECT_EQ(b.rank, 0);
  EXPECT_EQ(b.size, 1);
  ASSERT_TRUE(b.store);
  EXPECT_FALSE(b.store_server);
  b.store->set("k", "v");
  EXPECT_EQ(b.store->get_string("k", 0ms), "v");
}

TEST(Bootstrap, RankZeroHostsAndOthersConnect) {
  constexpr int kSize = 4;
  auto env_for = [](int rank, int port) {
    LaunchEnv env;
    env.launcher = Launcher::kTorchrun;
    env.rank = rank;
    env.size = kSize;
    env.local_rank = rank;
    env.local_size = kSize;
    env.store_host = "127.0.0.1";  // loopback: the hosting rank binds 127.0.0.1 only
    env.store_port = port;
    env.host_store = rank == 0;
    env.job_token = "job-42";
    return env;
  };
  Bootstrap root = bootstrap_from(env_for(0, 0), 5s);
  ASSERT_TRUE(root.store_server);
  int port = root.store_server->port();

  std::vector<std::future<std::string>> ranks;
  for (int r = 1; r < kSize; ++r) {
    ranks.push_back(std::async(std::launch::async, [&, r] {
      Bootstrap b = bootstrap_from(env_for(r, port), 5s);
      EXPECT_FALSE(b.store_server);
      EXPECT_EQ(b.job_token, "job-42");
      b.store->set("rank/" + std::to_string(r), "hello from " + std::to_string(r));
      b.store->wait({"rank/0"}, 5s);
      return b.store->get_string("rank/0", 5s);
    }));
  }
  root.store->set("rank/0", "hello from 0");
  root.store->wait({"rank/1", "rank/2", "rank/3"}, 5s);
  EXPECT_EQ(root.store->get_string("rank/3", 1s), "hello from 3");
  for (auto& f : ranks) EXPECT_EQ(f.get(), "hello from 0");
}

TEST(Bootstrap, WrongTokenFailsWithTheRank) {
  LaunchEnv host;
  host.launcher = Launcher::kPlait;
  host.size = 2;
  host.local_size = 2;
  host.store_host = "127.0.0.1";
  host.host_store = true;
  host.job_token = "right";
  Bootstrap root = bootstrap_from(host, 5s);

  LaunchEnv peer = host;
  peer.rank = 1;
  peer.local_rank = 1;
  peer.host_store = false;
  peer.store_port = root.store_server->port();
  peer.job_token = "wrong";
  try {
    bootstrap_from(peer, 5s);
    FAIL() << "bootstrap with the wrong token succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage);
    EXPECT_EQ(e.context().rank, 1);
    EXPECT_TRUE(contains(e.what(), "job token rejected")) << e.what();
  }
}

TEST(Bootstrap, FileStoreFromPath) {
  std::string dir =
      (std::filesystem::temp_directory_path() / ("plait-boot-" + std::to_string(::getpid())))
          .string();
  LaunchEnv env;
  env.launcher = Launcher::kSlurm;
  env.size = 2;
  env.local_size = 1;
  env.store_path = dir;
  Bootstrap b = bootstrap_from(env, 1s);
  b.store->set("k", "v");
  EXPECT_EQ(bootstrap_from(env, 1s).store->get_string("k", 1s), "v");
  std::filesystem::remove_all(dir);
}

TEST(Bootstrap, MultiRankJobWithoutAStoreIsRefused) {
  LaunchEnv env;
  env.launcher = Launcher::kOpenMpi;
  env.size = 2;
  env.local_size = 2;
  EXPECT_THROW(bootstrap_from(env, 1s), Error);
}

}  // namespace
}  // namespace plait
