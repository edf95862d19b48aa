#include <gtest/gtest.h>

#include "plait/error.h"

namespace plait {
namespace {

TEST(Error, WhatCarriesContextAndCategory) {
  Error e = remote_error("connection reset by peer",
                         {.rank = 2, .peer = 3, .op = "allreduce", .seq = 41, .bytes = 4194304});
  EXPECT_STREQ(e.what(),
               "rank 2: allreduce #41 with peer 3 (4194304 bytes): connection reset by peer [remote]");
  EXPECT_EQ(e.category(), ErrorCategory::kRemote);
  EXPECT_EQ(e.message(), "connection reset by peer");
}

TEST(Error, WithContextFillsOnlyUnsetFields) {
  Error inner = timeout_error("no reply", {.peer = 1});
  Error outer = inner.with_context({.rank = 0, .peer = 5, .op = "barrier", .seq = 3});
  EXPECT_EQ(outer.context().peer, 1);
  EXPECT_EQ(outer.context().rank, 0);
  EXPECT_EQ(outer.context().op, "barrier");
  EXPECT_EQ(outer.category(), ErrorCategory::kTimeout);
}

TEST(Error, SystemErrorAppendsErrnoText) {
  Error e = system_error("open /nope", ENOENT);
  EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos);
}

}  // namespace
}  // namespace plait
