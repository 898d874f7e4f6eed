// The CPU backend: 64-byte aligned host memory with live/peak accounting.
#include "tensor/cpu/cpu_backend.h"

#include <sys/sysinfo.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "qk/base/error.h"
#include "qk/base/timer.h"

namespace qk::cpu {

namespace {

class CpuBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::cpu; }
  int device_count() const override { return 1; }

  std::string device_name(int) const override {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    return "CPU";
  }

  uint64_t total_memory(int) const override {
    struct sysinfo si;
    if (sysinfo(&si) != 0) return 0;
    return static_cast<uint64_t>(si.totalram) * si.mem_unit;
  }

  void* allocate(size_t nbytes, int) override {
    // 64-byte alignment suits AVX-512 loads and oneDNN; round the size up as
    // aligned_alloc requires.
    size_t n = (nbytes + 63) & ~size_t(63);
    if (n == 0) n = 64;
    void* p = std::aligned_alloc(64, n);
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
    std::free(p);
    allocated_.fetch_sub(nbytes);
  }

  void copy(void* dst, Device, const void* src, Device, size_t nbytes) override {
    if (nbytes) std::memcpy(dst, src, nbytes);
  }

  void synchronize(int) override {}

  MemoryStats memory_stats(int) const override {
    return {allocated_.load(), peak_.load(), num_allocs_.load()};
  }
  void reset_peak_memory(int) override { peak_.store(allocated_.load()); }

 private:
  std::atomic<uint64_t> allocated_{0}, peak_{0}, num_allocs_{0};
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend b;
  return b;
}

}  // namespace qk::cpu
