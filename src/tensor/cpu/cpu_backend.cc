// The CPU backend: 64-byte aligned host memory with live/peak accounting;
// large blocks are reused through a BlockCache (block_cache.h).
#include "cpu/cpu_backend.h"

#include <sys/sysinfo.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "qk/base/env.h"
#include "qk/base/error.h"
#include "qk/base/host_info.h"
#include "qk/base/timer.h"
#include "cpu/block_cache.h"

namespace qk::cpu {

namespace {

bool cache_enabled() {
  // Function-local: the backend may be created during another file's static
  // initialisation.
  QK_ENV_BOOL(env_cpu_cache, "QK_CPU_CACHE", true,
              "Keep freed CPU tensor blocks of 1 MiB and more for reuse by the next "
              "allocation of the same size (0: return them to the system at once).");
  return env_cpu_cache.get();
}

// Below this, malloc's own heap reuses memory without faults (ResNet-18 at
// batch 1, all activations under 1 MiB: no page faults per image through
// malloc, ~2000 through exact-size blocks evicted and mapped again; the
// 2-core development VM, 2026-11-30, docs/tensor.md "CPU memory").
constexpr size_t kCacheMinBytes = size_t(1) << 20;

class CpuBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::cpu; }
  int device_count() const override { return 1; }

  std::string device_name(int) const override {
    std::string m = cpu_model_name();
    return m.empty() ? "CPU" : m;
  }

  uint64_t total_memory(int) const override {
    struct sysinfo si;
    if (sysinfo(&si) != 0) return 0;
    return static_cast<uint64_t>(si.totalram) * si.mem_unit;
  }

  void* allocate(size_t nbytes, int) override {
    // 64-byte alignment suits AVX-512 loads and oneDNN; round the size up as
    // aligned_alloc requires.
    void* p;
    if (cache_.handles(nbytes)) {
      p = cache_.allocate(nbytes);  // 256-byte aligned
    } else {
      size_t n = (nbytes + 63) & ~size_t(63);
      if (n == 0) n = 64;
      p = std::aligned_alloc(64, n);
    }
    QK_CHECK_AS(Error, p != nullptr, "out of CPU memory allocating ", format_bytes(nbytes),
                " (", format_bytes(allocated_.load()), " already held by tensors)");
    uint64_t now = allocated_.fetch_add(nbytes) + nbytes;
    uint64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    num_allocs_.fetch_add(1);
    return p;
  }

  void deallocate(void* p, size_t nbytes, int) override {
    if (cache_.handles(nbytes)) {
      cache_.deallocate(p, nbytes);
    } else {
      std::free(p);
    }
    allocated_.fetch_sub(nbytes);
  }

  void copy(void* dst, Device, const void* src, Device, size_t nbytes) override {
    if (nbytes) std::memcpy(dst, src, nbytes);
  }

  void synchronize(int) override {}

  MemoryStats memory_stats(int) const override {
    const uint64_t allocated = allocated_.load(), cached = cache_.cached_bytes();
    // reserved: what tensors asked for plus the cache (blocks' rounding to pages not counted)
    return {allocated, peak_.load(), num_allocs_.load(), allocated + cached, cached};
  }
  void reset_peak_memory(int) override { peak_.store(allocated_.load()); }
  void empty_cache(int) override { cache_.release_all(); }

  BlockCache& cache() { return cache_; }

 private:
  BlockCache cache_{kCacheMinBytes, cache_enabled()};
  std::atomic<uint64_t> allocated_{0}, peak_{0}, num_allocs_{0};
};

CpuBackend& the_backend() {
  // Never destroyed: tensors in static objects may be freed after it would be.
  static auto* b = new CpuBackend();
  return *b;
}

}  // namespace

Backend& cpu_backend() { return the_backend(); }
size_t cached_bytes() { return the_backend().cache().cached_bytes(); }
size_t cache_hits() { return the_backend().cache().hits(); }
void empty_cache() { the_backend().cache().release_all(); }

}  // namespace qk::cpu
