#include "fftw_planning.h"

#include <fftw3.h>

#include <algorithm>

#include "qk/base/thread_pool.h"

namespace qk::md {

std::mutex& fftw_planner_mutex() {
  static std::mutex mu;
  return mu;
}

#if QK_MD_FFTW_THREADS
namespace {
// FFTW's threaded plans run their loops on qk's pool (fftw_threads_set_callback, FFTW 3.3.9+) instead of
// threads of FFTW's own; set once per process before the first plan.
void fftw_loop_on_pool(void* (*work)(char*), char* jobdata, size_t elsize, int njobs, void*) {
  qk::parallel_for(0, njobs, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi; ++j) work(jobdata + elsize * j);
  });
}
}  // namespace

void plan_on_pool_threads() {
  static const bool ready = [] {
    if (fftw_init_threads() == 0) return false;
    fftw_threads_set_callback(fftw_loop_on_pool, nullptr);
    return true;
  }();
  if (ready) fftw_plan_with_nthreads(std::max(1, num_threads()));
}
#else
void plan_on_pool_threads() {}
#endif

}  // namespace qk::md
