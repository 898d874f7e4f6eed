// The parallel tests' main: ranks are forked processes, two to four on a
// machine of two cores, so each computes on one thread (qianka's pool and
// OpenMP) and OpenMP waits passively, or the ranks starve each other.
#include <gtest/gtest.h>

#include <cstdlib>

#include "qk/base/openmp_env.h"

int main(int argc, char** argv) {
  ::setenv("OMP_NUM_THREADS", "1", 0);
  ::setenv("QK_NUM_THREADS", "1", 0);
  qk::reexec_with_passive_openmp(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
