// PlanCache (src/tensor/plan_cache.h), the per-shape cache of cuBLASLt and
// cuDNN plans: one build per key, hits after it, nothing kept from a build
// that throws, one build when threads ask at once, counters shown by name
// in qk::cuda::plan_cache_stats().
#include "plan_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "qk/tensor/cuda.h"

namespace qk {
namespace {

struct FakePlan {
  int built_for = 0;
};

const cuda::PlanCacheStats* stats_of(const std::vector<cuda::PlanCacheStats>& all, const std::string& name) {
  for (const auto& s : all)
    if (s.name == name) return &s;
  return nullptr;
}

TEST(PlanCache, BuildsOncePerKeyAndCountsHits) {
  static PlanCache<FakePlan> cache("test_plans_once");
  int builds = 0;
  auto build = [&](int v) {
    return [&, v] {
      ++builds;
      auto p = std::make_unique<FakePlan>();
      p->built_for = v;
      return p;
    };
  };
  const FakePlan& a = cache.get({1, 2, 3}, build(1));
  const FakePlan& b = cache.get({1, 2, 3}, build(2));
  const FakePlan& c = cache.get({1, 2, 4}, build(3));
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(b.built_for, 1);
  EXPECT_EQ(c.built_for, 3);
  EXPECT_EQ(builds, 2);
  const auto* s = stats_of(cuda::plan_cache_stats(), "test_plans_once");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->builds, 2);
  EXPECT_EQ(s->hits, 1);
  EXPECT_EQ(s->size, 2);
}

TEST(PlanCache, AFailedBuildLeavesNothingBehind) {
  static PlanCache<FakePlan> cache("test_plans_failed");
  EXPECT_THROW(cache.get({7}, []() -> std::unique_ptr<FakePlan> { throw std::runtime_error("no algorithm"); }),
               std::runtime_error);
  const FakePlan& p = cache.get({7}, [] {
    auto q = std::make_unique<FakePlan>();
    q->built_for = 9;
    return q;
  });
  EXPECT_EQ(p.built_for, 9);
  const auto* s = stats_of(cuda::plan_cache_stats(), "test_plans_failed");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->builds, 1);
}

TEST(PlanCache, ThreadsAskingAtOnceShareOneBuild) {
  static PlanCache<FakePlan> cache("test_plans_threads");
  std::atomic<int> builds{0};
  std::vector<const FakePlan*> seen(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      seen[i] = &cache.get({42, i % 2}, [&] {
        builds.fetch_add(1);
        return std::make_unique<FakePlan>();
      });
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(builds.load(), 2);  // one per key
  for (int i = 2; i < 8; ++i) EXPECT_EQ(seen[i], seen[i % 2]);
}

}  // namespace
}  // namespace qk

// find() looks a plan up without building one (a graph capture must not run a library's set-up).
TEST(PlanCache, FindReturnsOnlyWhatWasBuilt) {
  qk::PlanCache<int> cache("test_find");
  EXPECT_EQ(cache.find({1, 2}), nullptr);
  const int& built = cache.get({1, 2}, [] { return std::make_unique<int>(7); });
  ASSERT_NE(cache.find({1, 2}), nullptr);
  EXPECT_EQ(cache.find({1, 2}), &built);
  EXPECT_EQ(cache.find({2, 1}), nullptr);
}
