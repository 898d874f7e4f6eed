// Starts an OpenMP team in a program that links qianka::base; the wait-policy
// tests (openmp_env_test.cc) read libgomp's own account of the policy it
// started with (OMP_DISPLAY_ENV=VERBOSE: GOMP_SPINCOUNT is 0 when passive).
#include <omp.h>

#include <cstdio>

int main() {
  int threads = 0;
#pragma omp parallel
  {
#pragma omp single
    threads = omp_get_num_threads();
  }
  std::printf("threads %d\n", threads);
  return threads > 0 ? 0 : 1;
}
