// How long the thread pool's idle threads (and a caller waiting for the
// last chunks of a parallel_for) spin before they sleep.
//
//   qk::ScopedPoolSpin spin(100);   // for a loop of short parallel sections
//
// Waking a sleeping thread costs 10-30 us per parallel_for on these VMs,
// which a step made of many short parallel loops pays every time (qk md:
// ~10 loops per 2-4 ms step). Spinning holds the cores, though: beside
// another runtime's threads (oneDNN's OpenMP team) it takes their cores, as
// their spinning took ours (docs/architecture.md, "OpenMP's wait policy").
// So the default is not to spin (QK_POOL_SPIN_US, 0) and code whose
// parallel sections use only this pool turns it on for its own duration.
#pragma once

#include <cstdint>

namespace qk {

// Microseconds; 0 sleeps at once.
int64_t pool_spin_us();
void set_pool_spin_us(int64_t us);

// Sets the spin for its lifetime unless QK_POOL_SPIN_US is set (the user's choice wins), then restores it.
class ScopedPoolSpin {
 public:
  explicit ScopedPoolSpin(int64_t us);
  ~ScopedPoolSpin();
  ScopedPoolSpin(const ScopedPoolSpin&) = delete;
  ScopedPoolSpin& operator=(const ScopedPoolSpin&) = delete;

 private:
  int64_t before_;
};

}  // namespace qk
