// A cache of plans keyed by what decides them: the first call with a key
// builds the plan (descriptors, an algorithm from a library's heuristics),
// later calls find it, as PyTorch keeps cuDNN's algorithm per convolution
// and cuBLASLt's per GEMM shape. A steady-state training step then does no
// descriptor or heuristic work at all. Plans live until the program ends
// (they hold no device memory); thread-safe; every cache's hits and builds
// show in qk::cuda::plan_cache_stats().
//
//   static PlanCache<GemmPlan> cache("cublaslt_matmul");
//   const GemmPlan& p = cache.get({device, m, n, k, ...}, [&] { return std::make_unique<GemmPlan>(...); });
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace qk {

using PlanKey = std::vector<int64_t>;

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the values
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

// The counters a cache shows (plan_cache_stats); registered by name.
class PlanCacheCounters {
 public:
  explicit PlanCacheCounters(std::string name);
  const std::string& name() const { return name_; }
  std::atomic<int64_t> hits{0}, builds{0}, size{0};

 private:
  std::string name_;
};

template <typename Plan>
class PlanCache {
 public:
  explicit PlanCache(std::string name) : counters_(std::move(name)) {}
  PlanCache(const PlanCache&) = delete;
  PlanCache& operator=(const PlanCache&) = delete;

  // The plan for `key`, built by build() (a std::unique_ptr<Plan>) on the
  // first call with it. A build that throws leaves nothing behind.
  // The plan for `key` if one was built; nullptr otherwise (nothing is built: e.g. during a graph capture,
  // where a library's set-up must not run).
  const Plan* find(const PlanKey& key) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = plans_.find(key);
    if (it == plans_.end()) return nullptr;
    counters_.hits.fetch_add(1, std::memory_order_relaxed);
    return it->second.get();
  }

  template <typename Build>
  const Plan& get(const PlanKey& key, Build&& build) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = plans_.find(key); it != plans_.end()) {
      counters_.hits.fetch_add(1, std::memory_order_relaxed);
      return *it->second;
    }
    std::unique_ptr<Plan> plan = build();
    const Plan& p = *plan;
    plans_.emplace(key, std::move(plan));
    counters_.builds.fetch_add(1, std::memory_order_relaxed);
    counters_.size.store(static_cast<int64_t>(plans_.size()), std::memory_order_relaxed);
    return p;
  }

 private:
  std::mutex mu_;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans_;
  PlanCacheCounters counters_;
};

}  // namespace qk
