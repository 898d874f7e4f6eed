// FFTW's planner as PME uses it: under one process-wide lock (FFTW's planner
// and plan destruction are not thread-safe, fftw_execute is: ranks played by
// threads make calculators in parallel), with plans whose loops run on qk's
// thread pool.
#pragma once

#include <mutex>

namespace qk::md {

std::mutex& fftw_planner_mutex();

// The next plans split their work over qk's threads (as many as the pool has when they are made); call
// with fftw_planner_mutex() held, before planning. Without FFTW's threads library: one thread.
void plan_on_pool_threads();

}  // namespace qk::md
