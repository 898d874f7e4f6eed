// The registry behind qk::cuda::plan_cache_stats(): every PlanCache's counters.
#include "plan_cache.h"

#include "qk/tensor/cuda.h"

namespace qk {

namespace {

std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}

std::vector<const PlanCacheCounters*>& registry() {
  static std::vector<const PlanCacheCounters*> all;
  return all;
}

}  // namespace

PlanCacheCounters::PlanCacheCounters(std::string name) : name_(std::move(name)) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().push_back(this);  // caches are static: they outlive every reader
}

namespace cuda {

std::vector<PlanCacheStats> plan_cache_stats() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<PlanCacheStats> out;
  for (const PlanCacheCounters* c : registry())
    out.push_back({c->name(), c->hits.load(), c->builds.load(), c->size.load()});
  return out;
}

}  // namespace cuda

}  // namespace qk
