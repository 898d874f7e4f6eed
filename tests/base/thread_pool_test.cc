#include "qk/base/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "qk/base/env.h"
#include "qk/base/pool_spin.h"

namespace {

TEST(ParallelFor, CoversEveryIndexOnce) {
  qk::set_num_threads(4);
  std::vector<std::atomic<int>> hits(100003);
  qk::parallel_for(0, static_cast<int64_t>(hits.size()), 100, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) hits[i]++;
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  qk::set_num_threads(2);
}

// Back-to-back small jobs whose chunk counts differ: a worker still leaving
// one job must never take a chunk of the next (a chunk run twice, or the
// caller waiting forever on a count that went below zero).
TEST(ParallelFor, BackToBackJobsRunEachChunkOnce) {
  qk::set_num_threads(8);
  std::vector<int> hits(64);
  for (int job = 0; job < 20000; ++job) {
    const int64_t n = 2 + job % 7 * 9;  // 2 .. 56 indices, 2 .. 8 chunks
    std::fill(hits.begin(), hits.end(), 0);
    qk::parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) hits[i]++;  // disjoint chunks: no atomics needed
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << "job " << job << " index " << i;
  }
  qk::set_num_threads(2);
}

// The same with idle threads spinning between jobs (they see a new job without the condition variable):
// still each chunk once, and the setting is restored when the scope ends.
TEST(ParallelFor, SpinningWorkersRunEachChunkOnce) {
  if (qk::env::get_raw("QK_POOL_SPIN_US")) GTEST_SKIP() << "QK_POOL_SPIN_US is set: ScopedPoolSpin keeps it";
  qk::set_num_threads(4);
  const int64_t before = qk::pool_spin_us();
  {
    const qk::ScopedPoolSpin spin(200);
    EXPECT_EQ(qk::pool_spin_us(), 200);
    std::vector<int> hits(64);
    for (int job = 0; job < 20000; ++job) {
      const int64_t n = 2 + job % 7 * 9;
      std::fill(hits.begin(), hits.end(), 0);
      qk::parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) hits[i]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << "job " << job << " index " << i;
    }
    EXPECT_THROW(qk::parallel_for(0, 100, 1, [&](int64_t lo, int64_t) {
                   if (lo > 50) throw std::runtime_error("boom");
                 }),
                 std::runtime_error);
  }
  EXPECT_EQ(qk::pool_spin_us(), before);
  qk::set_num_threads(2);  // resizing with spinning threads gone: they must still stop
}

TEST(ParallelFor, RethrowsChunkException) {
  qk::set_num_threads(3);
  EXPECT_THROW(qk::parallel_for(0, 1000, 1,
                                [&](int64_t lo, int64_t) {
                                  if (lo > 500) throw std::runtime_error("boom");
                                }),
               std::runtime_error);
  // The pool still works afterwards.
  std::atomic<int64_t> sum{0};
  qk::parallel_for(0, 1000, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 999 * 1000 / 2);
}

TEST(ParallelFor, NestedCallsRunSerially) {
  qk::set_num_threads(2);
  std::atomic<int> nested_serial{0};
  qk::parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    EXPECT_TRUE(qk::in_parallel_region());
    qk::parallel_for(0, 100, 1, [&](int64_t lo, int64_t hi) {
      if (lo == 0 && hi == 100) nested_serial++;
    });
  });
  EXPECT_EQ(nested_serial.load(), 2);
}

TEST(TaskPool, RunsAllTasks) {
  std::atomic<int> n{0};
  {
    qk::TaskPool pool(2);
    for (int i = 0; i < 100; ++i) pool.submit([&] { n++; });
    pool.wait_idle();
    EXPECT_EQ(n.load(), 100);
  }
}

}  // namespace
