// The intra-op thread pool that every CPU kernel shares.
//
//   qk::parallel_for(0, n, /*grain=*/4096, [&](int64_t lo, int64_t hi) {
//     for (int64_t i = lo; i < hi; ++i) y[i] = f(x[i]);
//   });
//
// The calling thread takes part; a call made from inside a parallel region
// runs serially (no nested oversubscription). The first exception a chunk
// throws is rethrown in the caller once every chunk has finished.
// The size comes from QK_NUM_THREADS (default: one per core) or set_num_threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

namespace qk {

int num_threads();
// Resizes the pool; n >= 1. Not safe while a parallel_for is running.
void set_num_threads(int n);
// True inside a parallel_for chunk.
bool in_parallel_region();

namespace detail {
using RangeFn = void (*)(void* ctx, int64_t lo, int64_t hi);
void parallel_for_impl(int64_t begin, int64_t end, int64_t grain, RangeFn fn, void* ctx);
}  // namespace detail

template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& f) {
  if (end <= begin) return;
  if (grain < 1) grain = 1;
  if (end - begin <= grain || num_threads() == 1 || in_parallel_region()) {
    f(begin, end);
    return;
  }
  using Fn = std::remove_reference_t<F>;
  auto trampoline = [](void* ctx, int64_t lo, int64_t hi) { (*static_cast<Fn*>(ctx))(lo, hi); };
  detail::parallel_for_impl(begin, end, grain, trampoline,
                            const_cast<void*>(static_cast<const void*>(&f)));
}

// A plain task pool for background work (data loading, async collectives):
// tasks run in FIFO order on `n` dedicated threads.
class TaskPool {
 public:
  explicit TaskPool(int n);
  ~TaskPool();  // waits for queued tasks
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;
  void submit(std::function<void()> task);
  // Blocks until the queue is empty and no task runs.
  void wait_idle();
  int size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qk
