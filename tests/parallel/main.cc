// The parallel tests' main: ranks are forked processes, two to four on a
// machine of two cores, so each computes on one thread of qianka's pool, or
// the ranks' pools starve each other (QK_NUM_THREADS set by the caller wins).
#include <gtest/gtest.h>

#include <cstdlib>

int main(int argc, char** argv) {
  ::setenv("QK_NUM_THREADS", "1", 0);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
