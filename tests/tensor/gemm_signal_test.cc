// Signals arriving while the f32 GEMM runs (Note [Signals during JIT GEMM]
// in qk/base/signal_mask.h): before the fix, oneDNN's JIT sgemm had RSP in
// a heap workspace, and a handled signal corrupted the heap.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "qk/base/signal_mask.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/linalg.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/ops/reduce.h"

namespace qk {
namespace {

std::atomic<int64_t> g_handled{0};
extern "C" void count_signal(int) { g_handled.fetch_add(1, std::memory_order_relaxed); }

bool same_mask(const sigset_t& a, const sigset_t& b) {
  for (int s = 1; s < NSIG; ++s)
    if (sigismember(&a, s) != sigismember(&b, s)) return false;
  return true;
}

TEST(SignalMask, BlocksAsyncSignalsInScopeAndRestores) {
  sigset_t before, inside, after;
  pthread_sigmask(SIG_SETMASK, nullptr, &before);
  {
    const AsyncSignalsBlocked scope;
    pthread_sigmask(SIG_SETMASK, nullptr, &inside);
  }
  pthread_sigmask(SIG_SETMASK, nullptr, &after);
  EXPECT_TRUE(sigismember(&inside, SIGTERM));
  EXPECT_TRUE(sigismember(&inside, SIGINT));
  EXPECT_TRUE(sigismember(&inside, SIGUSR1));
  EXPECT_FALSE(sigismember(&inside, SIGSEGV));  // faults stay deliverable
  EXPECT_TRUE(same_mask(before, after));
  // A matmul leaves the caller's mask as it found it.
  const Tensor a = randn({64, 64});
  (void)matmul(a, a);
  pthread_sigmask(SIG_SETMASK, nullptr, &after);
  EXPECT_TRUE(same_mask(before, after));
}

// A storm of handled signals, to this thread and to the process (so any of
// oneDNN's OpenMP workers may be picked), while f32 products run on every
// path (sgemm both layouts, the matmul primitive on 2 threads): every result
// stays right and the process survives; the signals are all handled.
TEST(SignalMask, HandledSignalsDuringF32GemmsCorruptNothing) {
  struct sigaction sa {}, old {};
  sa.sa_handler = count_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ASSERT_EQ(::sigaction(SIGUSR1, &sa, &old), 0);
  const int threads_before = num_threads();
  set_num_threads(2);
  manual_seed(3);
  const Tensor a = randn({192, 256}), b = randn({256, 320}), bt = randn({320, 256});
  const Tensor want_ab = matmul(a, b), want_abt = matmul(a, bt.t());
  std::atomic<bool> stop{false};
  const pthread_t target = pthread_self();
  g_handled = 0;
  std::thread storm([&] {
    for (int i = 0; !stop.load(); ++i) {
      if (i % 2) pthread_kill(target, SIGUSR1);
      else ::kill(::getpid(), SIGUSR1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  int64_t rounds = 0;
  double worst = 0;
  while (std::chrono::steady_clock::now() < until) {
    worst = std::max(worst, amax(abs(matmul(a, b) - want_ab)).item<double>());
    worst = std::max(worst, amax(abs(matmul(a, bt.t()) - want_abt)).item<double>());
    ++rounds;
  }
  stop = true;
  storm.join();
  // A signal still pending for the process (every thread blocking it that
  // instant) is discarded by SIG_IGN, so restoring the default action
  // cannot end the test binary later.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGUSR1, &ignore, nullptr);
  ::sigaction(SIGUSR1, &old, nullptr);
  set_num_threads(threads_before);
  EXPECT_GT(rounds, 10);
  EXPECT_GT(g_handled.load(), 10);
  EXPECT_EQ(worst, 0.0);
}

}  // namespace
}  // namespace qk
