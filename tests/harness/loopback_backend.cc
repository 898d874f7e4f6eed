#include "harness/loopback_backend.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "qk/tensor/backend.h"
#include "qk/tensor/kernel_tables.h"
#include "qk/tensor/ops/attention.h"
#include "qk/tensor/ops/view.h"

namespace qk::harness {

namespace {

class LoopbackBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::privateuse1; }
  int device_count() const override { return 1; }
  std::string device_name(int) const override { return "loopback (host memory, CPU kernels)"; }
  uint64_t total_memory(int) const override { return uint64_t(1) << 32; }
  void* allocate(size_t n, int) override {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.allocated += n;
    stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
    ++stats_.num_allocs;
    return std::malloc(n ? n : 1);
  }
  void deallocate(void* p, size_t n, int) override {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.allocated -= n;
    std::free(p);
  }
  void copy(void* dst, Device, const void* src, Device, size_t n) override {
    if (n) std::memcpy(dst, src, n);
  }
  // Pinned memory is plain host memory here; what the tests read is which
  // path a copy took and how many pinned blocks are alive.
  void copy_async(void* dst, Device, const void* src, Device, size_t n) override {
    if (n) std::memcpy(dst, src, n);
    std::lock_guard<std::mutex> lk(mu_);
    ++counts_.async_copies;
  }
  void* allocate_pinned(size_t n) override {
    std::lock_guard<std::mutex> lk(mu_);
    ++counts_.pinned_blocks;
    return std::malloc(n ? n : 1);
  }
  void deallocate_pinned(void* p) override {
    std::lock_guard<std::mutex> lk(mu_);
    --counts_.pinned_blocks;
    std::free(p);
  }
  LoopbackCounts counts() const {
    std::lock_guard<std::mutex> lk(mu_);
    return counts_;
  }
  void synchronize(int) override {}
  MemoryStats memory_stats(int) const override {
    std::lock_guard<std::mutex> lk(mu_);
    return stats_;
  }
  void reset_peak_memory(int) override {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.peak_allocated = stats_.allocated;
  }

 private:
  mutable std::mutex mu_;
  MemoryStats stats_;
  LoopbackCounts counts_;
};

LoopbackBackend& instance() {
  static LoopbackBackend b;
  return b;
}

// The same bytes, seen as a CPU tensor (the device memory is host memory),
// keeping the device storage alive as long as the alias.
Tensor host_alias(const Tensor& t) {
  if (!t.defined() || t.device().is_cpu()) return t;
  std::shared_ptr<Storage> keep = t.storage();
  auto alias = std::make_shared<Storage>(keep->data(), keep->nbytes(), kCPU,
                                         [keep](void*) mutable { keep.reset(); });
  return make_tensor(alias, t.dtype(), t.sizes(), t.strides(), t.storage_offset());
}

// Arguments to the CPU kernel: tensors as host aliases, the rest as they are.
Tensor on_host(const Tensor& t) { return host_alias(t); }
template <typename T>
const T& on_host(const T& v) {
  return v;
}

void note_device(Device& d, const Tensor& t) {
  if (t.defined() && !t.device().is_cpu()) d = t.device();
}
template <typename T>
void note_device(Device&, const T&) {}

// What the CPU kernel returns, copied onto the device.
Tensor on_device(const Tensor& t, Device d) { return t.defined() ? ops::to_device(t, d) : t; }
ops::FlashAttentionResult on_device(const ops::FlashAttentionResult& r, Device d) {
  return {on_device(r.out, d), on_device(r.lse, d)};
}
template <typename... T>
std::tuple<T...> on_device(const std::tuple<T...>& r, Device d) {
  return std::apply([&](const auto&... t) { return std::tuple<T...>(on_device(t, d)...); }, r);
}
template <typename A, typename B>
std::pair<A, B> on_device(const std::pair<A, B>& r, Device d) {
  return {on_device(r.first, d), on_device(r.second, d)};
}

template <auto& Table, typename Fn>
struct Forward;
template <auto& Table, typename R, typename... A>
struct Forward<Table, R(A...)> {
  static R call(A... a) {
    Device d = kLoopback;
    (note_device(d, a), ...);
    auto* cpu = Table.get(kCPU);
    if constexpr (std::is_void_v<R>) {
      cpu(on_host(a)...);
    } else {
      return on_device(cpu(on_host(a)...), d);
    }
  }
};

#define QK_LOOPBACK_KERNELS(X)                                 \
  X(ops::copy_kernel, ops::CopyFn)                             \
  X(ops::fill_kernel, ops::FillFn)                             \
  X(ops::binary_kernel, ops::BinaryFn)                         \
  X(ops::unary_kernel, ops::UnaryFn)                           \
  X(ops::mm_kernel, ops::MmFn)                                 \
  X(ops::bmm_kernel, ops::MmFn)                                \
  X(ops::linear_kernel, ops::LinearFn)                         \
  X(ops::conv2d_fwd_kernel, ops::Conv2dFwdFn)                  \
  X(ops::conv2d_bwd_kernel, ops::Conv2dBwdFn)                  \
  X(ops::flash_attention_fwd_kernel, ops::FlashAttentionFwdFn) \
  X(ops::flash_attention_bwd_kernel, ops::FlashAttentionBwdFn)

}  // namespace

LoopbackCounts loopback_counts() { return instance().counts(); }

void install_loopback() {
  register_backend(&instance());
#define QK_SET(table, Fn) table.set(DeviceType::privateuse1, &Forward<table, Fn>::call);
  QK_LOOPBACK_KERNELS(QK_SET)
#undef QK_SET
}

std::vector<std::string> loopback_kernels() {
  std::vector<std::string> names;
#define QK_NAME(table, Fn) names.push_back(table.name());
  QK_LOOPBACK_KERNELS(QK_NAME)
#undef QK_NAME
  return names;
}

}  // namespace qk::harness
