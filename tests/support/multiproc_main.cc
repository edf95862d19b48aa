// main() of the multi-process tests: a rank in child mode runs its program; otherwise gtest.
#include <gtest/gtest.h>

#include "support/job.h"

int main(int argc, char** argv) {
  int code = plait::testing::run_child_mode_if_requested();
  if (code >= 0) return code;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
