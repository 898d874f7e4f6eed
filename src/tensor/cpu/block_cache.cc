// Large-block reuse for the CPU allocator (see block_cache.h).
#include "cpu/block_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdint>

namespace qk::cpu {

namespace {
size_t page_size() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

constexpr size_t kHuge = size_t(2) << 20;

// Blocks of several huge pages are mapped 2 MiB-aligned and marked for
// transparent huge pages: one fault per 2 MiB instead of per 4 KiB when a
// block is first touched (and fewer TLB misses in the kernels). The 4 MiB
// floor was not measured against others (docs/tensor.md, "CPU memory").
void* map(size_t n) {
  const bool huge = n >= 2 * kHuge;
  const size_t span = huge ? n + kHuge : n;
  void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  if (!huge) return p;
  // Keep the aligned n bytes, unmap the rest (munmap takes partial ranges).
  auto base = reinterpret_cast<uintptr_t>(p);
  const uintptr_t start = (base + kHuge - 1) & ~(kHuge - 1);
  if (start > base) munmap(p, start - base);
  const uintptr_t end = base + span, stop = start + n;
  if (end > stop) munmap(reinterpret_cast<void*>(stop), end - stop);
  void* q = reinterpret_cast<void*>(start);
  madvise(q, n, MADV_HUGEPAGE);  // advice only: ignore failure
  return q;
}
// The mapping a block's pointer lies in (the pointer is page start + colour).
void* page_base(void* p) {
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~(page_size() - 1));
}
}  // namespace

size_t BlockCache::round_up(size_t nbytes) {
  const size_t pg = page_size();
  const size_t n = (nbytes + pg - 1) / pg * pg + pg;  // + a page of room for the colour
  // Size classes an eighth of a power of two apart (at most 12.5% above the request): blocks whose size
  // varies a little from call to call (an MoE layer's routed rows, the expert all-to-all's buffers) share
  // a class, so a freed one serves the next instead of each missing, mapping and faulting anew.
  const size_t step = std::max(pg, std::bit_floor(n) / 8);
  return (n + step - 1) / step * step;
}

void* BlockCache::allocate(size_t nbytes) {
  const size_t n = round_up(nbytes);
  std::lock_guard<std::mutex> lk(mu_);
  // Most recently freed first: its pages are the likeliest to be in cache. Else the smallest cached block
  // under twice the size: sizes that follow an MoE layer's routing vary by more than a class from one
  // micro-batch to the next, and each miss would unmap an older block to map and fault in a new one.
  auto fit = free_.rend();
  for (auto it = free_.rbegin(); it != free_.rend(); ++it) {
    if (it->size == n) {
      fit = it;
      break;
    }
    if (it->size > n && it->size < 2 * n && (fit == free_.rend() || it->size < fit->size)) fit = it;
  }
  if (fit != free_.rend()) {
    const Block b = *fit;
    free_.erase(std::next(fit).base());
    if (b.size != n) larger_[b.p] = b.size;
    cached_ -= b.size;
    live_ += b.size;
    ++hits_;
    return b.p;
  }
  // Keep live + cached <= the peak of live bytes, counting the new block.
  const size_t total = live_ + cached_ + n, bound = std::max(peak_live_, live_ + n);
  if (total > bound) evict(total - bound);
  void* base = map(n);
  if (base == nullptr) {  // give back whatever is still cached and try once more
    release_all_locked();
    base = map(n);
    if (base == nullptr) return nullptr;
  }
  live_ += n;
  peak_live_ = std::max(peak_live_, live_);
  // Colour: blocks start at different offsets within a page (multiples of
  // 256 B). Page-aligned operands of an elementwise kernel alias each other
  // in the 4 KiB store-forwarding check and in the same L1 sets: SimpleCNN's
  // bf16 ReLU kernels ran several times slower on page-aligned blocks.
  const size_t colour = (colours_++ % 16) * 256;
  return static_cast<char*>(base) + colour;
}

void BlockCache::deallocate(void* p, size_t nbytes) {
  size_t n = round_up(nbytes);
  std::lock_guard<std::mutex> lk(mu_);
  if (const auto it = larger_.find(p); it != larger_.end()) {  // a larger cached block served this one
    n = it->second;
    larger_.erase(it);
  }
  live_ -= n;
  if (!enabled_) {
    munmap(page_base(p), n);
    return;
  }
  free_.push_back({n, p});
  cached_ += n;
}

void BlockCache::evict(size_t want) {
  size_t freed = 0;
  while (freed < want && !free_.empty()) {
    const Block b = free_.front();
    free_.pop_front();
    munmap(page_base(b.p), b.size);
    cached_ -= b.size;
    freed += b.size;
  }
}

void BlockCache::release_all() {
  std::lock_guard<std::mutex> lk(mu_);
  release_all_locked();
}

void BlockCache::release_all_locked() {
  evict(cached_ + 1);
  peak_live_ = live_;  // the allowance starts again from what is in use
}

size_t BlockCache::cached_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return cached_;
}

size_t BlockCache::hits() const {
  std::lock_guard<std::mutex> lk(mu_);
  return hits_;
}

}  // namespace qk::cpu
