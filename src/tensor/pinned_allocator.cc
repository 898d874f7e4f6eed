#include "pinned_allocator.h"

#include <algorithm>

#include "qk/base/error.h"

namespace qk {

size_t CachingPinnedAllocator::size_class(size_t bytes) {
  size_t c = 4096;
  while (c < bytes) c <<= 1;
  return c;
}

bool CachingPinnedAllocator::uses_done(Block& b) {
  auto pending = std::remove_if(b.events.begin(), b.events.end(), [&](void* e) {
    if (!raw_.event_done(e)) return false;
    raw_.destroy_event(e);
    return true;
  });
  b.events.erase(pending, b.events.end());
  return b.events.empty();
}

void CachingPinnedAllocator::release(std::map<uintptr_t, Block>::iterator it) {
  stats_.reserved -= it->second.size;
  stats_.cached -= it->second.size;
  raw_.raw_free_pinned(reinterpret_cast<void*>(it->first));
  blocks_.erase(it);
}

void* CachingPinnedAllocator::allocate(size_t bytes) {
  const size_t size = size_class(bytes);
  std::lock_guard<std::mutex> g(mu_);
  ++stats_.num_allocs;
  for (auto& [addr, b] : blocks_) {
    if (b.in_use || b.size != size) continue;
    if (!uses_done(b)) {
      ++stats_.waited_for;
      continue;
    }
    b.in_use = true;
    stats_.cached -= size;
    ++stats_.in_use;
    ++stats_.pool_hits;
    return reinterpret_cast<void*>(addr);
  }
  void* p = raw_.raw_alloc_pinned(size);
  if (p == nullptr) {  // give back what is cached and done, then once more
    for (auto it = blocks_.begin(); it != blocks_.end();) {
      auto next = std::next(it);
      if (!it->second.in_use && uses_done(it->second)) release(it);
      it = next;
    }
    p = raw_.raw_alloc_pinned(size);
    if (p == nullptr) return nullptr;
  }
  Block b;
  b.size = size;
  b.in_use = true;
  blocks_.emplace(reinterpret_cast<uintptr_t>(p), std::move(b));
  stats_.reserved += size;
  ++stats_.in_use;
  return p;
}

void CachingPinnedAllocator::free(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> g(mu_);
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(p));
  QK_CHECK_AS(InternalError, it != blocks_.end() && it->second.in_use,
              "CachingPinnedAllocator::free: ", p, " is not a block in use of this allocator");
  it->second.in_use = false;
  stats_.cached += it->second.size;
  --stats_.in_use;
}

bool CachingPinnedAllocator::record_use(const void* p, void* stream) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> g(mu_);
  auto it = blocks_.upper_bound(a);
  if (it == blocks_.begin()) return false;
  --it;
  if (a >= it->first + it->second.size) return false;
  it->second.events.push_back(raw_.record_event(stream));
  return true;
}

bool CachingPinnedAllocator::owns(const void* p) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> g(mu_);
  auto it = blocks_.upper_bound(a);
  if (it == blocks_.begin()) return false;
  --it;
  return a < it->first + it->second.size;
}

void CachingPinnedAllocator::empty_cache() {
  std::lock_guard<std::mutex> g(mu_);
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    auto next = std::next(it);
    if (!it->second.in_use && uses_done(it->second)) release(it);
    it = next;
  }
}

PinnedMemoryStats CachingPinnedAllocator::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  return stats_;
}

// Blocks still in use belong to tensors that outlive the allocator (static
// destruction at exit): left to the process's end, as blocks whose copies
// have not finished.
CachingPinnedAllocator::~CachingPinnedAllocator() { empty_cache(); }

}  // namespace qk
