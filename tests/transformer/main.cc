// The transformer tests' main: passive OpenMP waits, as the qk CLI runs.
// oneDNN's sgemm runs each (here tiny) GEMM on an OpenMP team whose idle
// threads otherwise spin and starve qianka's own pool: the overfit test took
// 40x longer with libgomp's default active waiting (qk/base/openmp_env.h).
#include <gtest/gtest.h>

#include "qk/base/openmp_env.h"

int main(int argc, char** argv) {
  qk::reexec_with_passive_openmp(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
