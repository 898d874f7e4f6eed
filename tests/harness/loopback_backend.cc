#include "harness/loopback_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <cstring>
#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "qk/tensor/backend.h"
#include "qk/tensor/kernel_tables.h"
#include "qk/tensor/ops/attention.h"
#include "qk/tensor/ops/view.h"
#include "op_kernel_tables.h"
#include "qk/tensor/ops/optimizer.h"
#include "qk/tensor/sync_debug.h"
#include "qk/base/error.h"
#include <functional>
#include <utility>
#include "device_allocator.h"

namespace qk::harness {

namespace {

// Its memory comes through the caching allocator the GPU backends use
// (device_allocator.h), so the counts of raw allocations per step are a
// GPU's cudaMalloc calls.
class LoopbackBackend final : public Backend, public RawDeviceMemory {
 public:
  DeviceType type() const override { return DeviceType::privateuse1; }
  int device_count() const override { return 1; }
  std::string device_name(int) const override { return "loopback (host memory, CPU kernels)"; }
  uint64_t total_memory(int) const override { return uint64_t(1) << 32; }
  void* allocate(size_t n, int) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stats_.allocated += n;
      stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
      ++stats_.num_allocs;
    }
    return alloc_.allocate(n, 0, /*stream=*/0);
  }
  void deallocate(void* p, size_t n, int) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stats_.allocated -= n;
    }
    alloc_.free(p);
  }
  // RawDeviceMemory: a GPU runtime's malloc and free.
  void* raw_alloc(size_t n, int) override {
    std::lock_guard<std::mutex> lk(mu_);
    ++counts_.raw_allocs;
    if (!poisoned_) return std::malloc(n ? n : 1);
    // Two mappings of one memfd: the device address, which no host code may
    // touch (PROT_NONE: a read faults), and the host view the kernels and
    // copies use, as a GPU's memory is reachable only through them.
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t bytes = (std::max<size_t>(n, 1) + page - 1) / page * page;
    const int fd = ::memfd_create("qk-loopback", MFD_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) std::abort();
    void* host = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    void* dev = ::mmap(nullptr, bytes, PROT_NONE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (host == MAP_FAILED || dev == MAP_FAILED) std::abort();
    blocks_[reinterpret_cast<uintptr_t>(dev)] = {static_cast<char*>(host), bytes};
    return dev;
  }
  void raw_free(void* p, int) override {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(p));
    if (it == blocks_.end()) return std::free(p);  // from before poison()
    ::munmap(it->second.host, it->second.bytes);
    ::munmap(p, it->second.bytes);
    blocks_.erase(it);
  }
  uint64_t total_bytes(int device) override { return total_memory(device); }
  std::string label(int) override { return "loopback:0"; }
  // One stream, whose work is done when it is queued.
  void* record_event(void*) override { return nullptr; }
  bool event_done(void*) override { return true; }
  void destroy_event(void*) override {}
  void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t n) override {
    if (recording_ && n) {
      // What a CUDA capture refuses: the host cannot read results the
      // recorded work has not made, nor give it pageable memory to read later.
      QK_CHECK_DEVICE(!dst_dev.is_cpu(), "loopback:0: a copy to the host cannot be recorded in a graph (the host "
                      "would read it before the recorded work ran); read results after replay()");
      QK_CHECK_DEVICE(!src_dev.is_cpu(), "loopback:0: a blocking copy from host memory cannot be recorded in a "
                      "graph; copy inputs to the device before capture (or from pinned memory, asynchronously)");
      record([this, dst, src, n] { std::memcpy(host_view(dst, kLoopback), host_view(src, kLoopback), n); });
      return;
    }
    // As a GPU's: the host waits for the device before it reads what came back.
    if (n && dst_dev.is_cpu() && !src_dev.is_cpu()) note_host_sync(src_dev, "a copy to the host");
    if (n) std::memcpy(host_view(dst, dst_dev), host_view(src, src_dev), n);
  }
  // The host address of device memory at p (itself where memory is not poisoned).
  void* host_view(const void* p, Device d) const {
    if (!poisoned_ || d.is_cpu() || p == nullptr) return const_cast<void*>(p);
    std::lock_guard<std::mutex> lk(mu_);
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = blocks_.upper_bound(a);
    if (it == blocks_.begin()) std::abort();
    --it;
    if (a >= it->first + it->second.bytes) std::abort();
    return it->second.host + (a - it->first);
  }
  void poison() { poisoned_ = true; }
  // Pinned memory is plain host memory here; what the tests read is which
  // path a copy took and how many pinned blocks are alive.
  void copy_async(void* dst, Device dst_dev, const void* src, Device src_dev, size_t n) override {
    if (recording_ && n) {
      QK_CHECK_DEVICE(!dst_dev.is_cpu(), "loopback:0: a copy to the host cannot be recorded in a graph; read "
                      "results after replay()");
      record([this, dst, dst_dev, src, src_dev, n] {
        std::memcpy(host_view(dst, dst_dev), host_view(src, src_dev), n);
      });
      return;
    }
    if (n) std::memcpy(host_view(dst, dst_dev), host_view(src, src_dev), n);
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
  void synchronize(int) override {  // the Backend's and the allocator's
    QK_CHECK_DEVICE(!recording_, "loopback:0: synchronize cannot be recorded in a graph (nothing recorded has run)");
  }

  // ---- graphs: each kernel call and copy recorded as a closure over its
  // arguments (tensors keep their memory), replayed in order. A kernel that
  // returns tensors runs once at capture on copies of its inputs, for the
  // shapes of its outputs (no side effects); replay computes into them.
  class Graph final : public DeviceGraph {
   public:
    explicit Graph(std::vector<std::function<void()>> nodes) : nodes_(std::move(nodes)) {}
    void replay() override {
      for (const auto& node : nodes_) node();
    }
    int64_t num_nodes() const override { return static_cast<int64_t>(nodes_.size()); }

   private:
    std::vector<std::function<void()>> nodes_;
  };
  std::unique_ptr<DeviceGraph> capture_graph(int, const std::function<void()>& fn) override {
    QK_CHECK_DEVICE(!recording_, "loopback:0 is already capturing a graph");
    std::vector<std::function<void()>> nodes;
    recording_ = &nodes;
    try {
      fn();
    } catch (...) {
      recording_ = nullptr;
      throw;
    }
    recording_ = nullptr;
    return std::make_unique<Graph>(std::move(nodes));
  }
  bool capturing(int) const override { return recording_ != nullptr; }
  void record(std::function<void()> node) { recording_->push_back(std::move(node)); }
  // Stops recording for a scope (the capture's own bookkeeping copies).
  class Unrecorded {
   public:
    explicit Unrecorded(LoopbackBackend& b) : b_(b), saved_(b.recording_) { b.recording_ = nullptr; }
    ~Unrecorded() { b_.recording_ = saved_; }

   private:
    LoopbackBackend& b_;
    std::vector<std::function<void()>>* saved_;
  };
  MemoryStats memory_stats(int) const override {
    std::lock_guard<std::mutex> lk(mu_);
    return stats_;
  }
  void reset_peak_memory(int) override {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.peak_allocated = stats_.allocated;
  }

 private:
  struct Block {
    char* host;
    size_t bytes;
  };
  mutable std::mutex mu_;
  MemoryStats stats_;
  LoopbackCounts counts_;
  bool poisoned_ = false;
  std::vector<std::function<void()>>* recording_ = nullptr;  // the graph being captured
  std::map<uintptr_t, Block> blocks_;  // device address -> its host view
  CachingDeviceAllocator alloc_{*this};  // last: destroyed first, while blocks_ lives
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
  auto alias = std::make_shared<Storage>(instance().host_view(keep->data(), t.device()), keep->nbytes(), kCPU,
                                         [keep](void*) mutable { keep.reset(); });
  return make_tensor(alias, t.dtype(), t.sizes(), t.strides(), t.storage_offset());
}

// Arguments to the CPU kernel: tensors as host aliases, the rest as they are.
Tensor on_host(const Tensor& t) { return host_alias(t); }
// The parameters with their counter base (a device tensor) mapped by f.
template <typename F>
ops::FlashAttentionParams with_base(const ops::FlashAttentionParams& p, F f) {
  ops::FlashAttentionParams h = p;
  h.offset_base = f(p.offset_base);
  return h;
}
ops::FlashAttentionParams on_host(const ops::FlashAttentionParams& p) { return with_base(p, host_alias); }
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
// The complete set's argument and result kinds.
std::vector<Tensor> on_host(const std::vector<Tensor>& v) {
  std::vector<Tensor> out;
  for (const Tensor& t : v) out.push_back(host_alias(t));
  return out;
}
void note_device(Device& d, const std::vector<Tensor>& v) {
  for (const Tensor& t : v) note_device(d, t);
}
std::vector<Tensor> on_device(const std::vector<Tensor>& v, Device d) {
  std::vector<Tensor> out;
  for (const Tensor& t : v) out.push_back(on_device(t, d));
  return out;
}
ops::CrossEntropyResult on_device(const ops::CrossEntropyResult& r, Device d) {
  return {on_device(r.loss, d), on_device(r.log_probs, d)};
}
ops::BatchNormResult on_device(const ops::BatchNormResult& r, Device d) {
  return {on_device(r.out, d), on_device(r.save_mean, d), on_device(r.save_invstd, d)};
}
ops::LinearCrossEntropyResult on_device(const ops::LinearCrossEntropyResult& r, Device d) {
  return {on_device(r.loss, d), on_device(r.grad_hidden, d), on_device(r.grad_weight, d)};
}

// At capture: a kernel's inputs as CPU copies, so running it for its
// outputs' shapes changes nothing.
Tensor host_copy(const Tensor& t) { return t.defined() ? ops::clone(host_alias(t)) : t; }
std::vector<Tensor> host_copy(const std::vector<Tensor>& v) {
  std::vector<Tensor> out;
  for (const Tensor& t : v) out.push_back(host_copy(t));
  return out;
}
ops::FlashAttentionParams host_copy(const ops::FlashAttentionParams& p) {
  return with_base(p, [](const Tensor& t) { return host_copy(t); });
}
template <typename T>
const T& host_copy(const T& v) {
  return v;
}

// At replay: a kernel's fresh (CPU) results into the device outputs made at capture.
void assign(const Tensor& out, const Tensor& fresh) {
  if (out.defined()) ops::copy_(host_alias(out), fresh);
}
void assign(const std::vector<Tensor>& out, const std::vector<Tensor>& fresh) {
  for (size_t i = 0; i < out.size(); ++i) assign(out[i], fresh[i]);
}
template <typename... T>
void assign(const std::tuple<T...>& out, const std::tuple<T...>& fresh) {
  [&]<size_t... I>(std::index_sequence<I...>) {
    (assign(std::get<I>(out), std::get<I>(fresh)), ...);
  }(std::index_sequence_for<T...>{});
}
template <typename A, typename B>
void assign(const std::pair<A, B>& out, const std::pair<A, B>& fresh) {
  assign(out.first, fresh.first);
  assign(out.second, fresh.second);
}
void assign(const ops::FlashAttentionResult& o, const ops::FlashAttentionResult& f) {
  assign(o.out, f.out);
  assign(o.lse, f.lse);
}
void assign(const ops::CrossEntropyResult& o, const ops::CrossEntropyResult& f) {
  assign(o.loss, f.loss);
  assign(o.log_probs, f.log_probs);
}
void assign(const ops::BatchNormResult& o, const ops::BatchNormResult& f) {
  assign(o.out, f.out);
  assign(o.save_mean, f.save_mean);
  assign(o.save_invstd, f.save_invstd);
}
void assign(const ops::LinearCrossEntropyResult& o, const ops::LinearCrossEntropyResult& f) {
  assign(o.loss, f.loss);
  assign(o.grad_hidden, f.grad_hidden);
  assign(o.grad_weight, f.grad_weight);
}

template <auto& Table, typename Fn>
struct Forward;
template <auto& Table, typename R, typename... A>
struct Forward<Table, R(A...)> {
  static R call(A... a) {
    Device d = kLoopback;
    (note_device(d, a), ...);
    auto* cpu = Table.get(kCPU);
    LoopbackBackend& b = instance();
    if (b.capturing(0)) {
      auto args = std::make_shared<std::tuple<std::decay_t<A>...>>(a...);
      auto run = [args, cpu] { return std::apply([&](const auto&... x) { return cpu(on_host(x)...); }, *args); };
      if constexpr (std::is_void_v<R>) {
        b.record(run);
        return;
      } else {
        R out;
        {
          LoopbackBackend::Unrecorded pause(b);
          out = on_device(cpu(host_copy(a)...), d);
        }
        b.record([run, out] { assign(out, run()); });
        return out;
      }
    }
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

// Every other table of the CPU backend: the tensor layer's private ones
// (op_kernel_tables.h) and the optimizers' fused steps.
#define QK_LOOPBACK_MORE_KERNELS(X)                                        \
  X(ops::reduce_kernel, ops::ReduceFn)                                     \
  X(ops::max_min_dim_kernel, ops::MaxMinDimFn)                             \
  X(ops::softmax_kernel, ops::SoftmaxFn)                                   \
  X(ops::softmax_backward_kernel, ops::SoftmaxBwdFn)                       \
  X(ops::cross_entropy_kernel, ops::CrossEntropyFn)                        \
  X(ops::cross_entropy_backward_kernel, ops::CrossEntropyBwdFn)            \
  X(ops::max_pool2d_kernel, ops::MaxPoolFn)                                \
  X(ops::max_pool2d_backward_kernel, ops::MaxPoolBwdFn)                    \
  X(ops::avg_pool2d_kernel, ops::AvgPoolFn)                                \
  X(ops::avg_pool2d_backward_kernel, ops::AvgPoolBwdFn)                    \
  X(ops::adaptive_avg_pool2d_kernel, ops::AdaptivePoolFn)                  \
  X(ops::adaptive_avg_pool2d_backward_kernel, ops::AdaptivePoolBwdFn)      \
  X(ops::batch_norm_kernel, ops::BatchNormFn)                              \
  X(ops::batch_norm_backward_kernel, ops::BatchNormBwdFn)                  \
  X(ops::dropout_kernel, ops::DropoutFn)                                   \
  X(ops::unary_backward_kernel, ops::UnaryBwdFn)                           \
  X(ops::add_inplace_kernel, ops::AddInplaceFn)                            \
  X(ops::clamp_kernel, ops::ClampFn)                                       \
  X(ops::clamp_backward_kernel, ops::ClampBwdFn)                           \
  X(ops::where_kernel, ops::WhereFn)                                       \
  X(ops::layer_norm_kernel, ops::LayerNormFn)                              \
  X(ops::layer_norm_backward_kernel, ops::LayerNormBwdFn)                  \
  X(ops::rms_norm_kernel, ops::RmsNormFn)                                  \
  X(ops::rms_norm_backward_kernel, ops::RmsNormBwdFn)                      \
  X(ops::embedding_kernel, ops::EmbeddingFn)                               \
  X(ops::embedding_backward_kernel, ops::EmbeddingBwdFn)                   \
  X(ops::rotary_embedding_kernel, ops::RotaryFn)                           \
  X(ops::swiglu_kernel, ops::SwigluFn)                                     \
  X(ops::swiglu_backward_kernel, ops::SwigluBwdFn)                         \
  X(ops::linear_cross_entropy_kernel, ops::LinearCrossEntropyFn)           \
  X(ops::cat_kernel, ops::CatFn)                                           \
  X(ops::index_select_kernel, ops::IndexSelectFn)                          \
  X(ops::index_add_kernel, ops::IndexAddFn)                                \
  X(ops::gather_kernel, ops::IndexSelectFn)                                \
  X(ops::scatter_add_kernel, ops::IndexAddFn)                              \
  X(ops::topk_kernel, ops::TopkFn)                                         \
  X(ops::one_hot_kernel, ops::OneHotFn)                                    \
  X(ops::grouped_mm_kernel, ops::GroupedMmFn)                              \
  X(ops::grouped_mm_tn_kernel, ops::GroupedMmTnFn)                         \
  X(ops::sgd_step_kernel, ops::SgdStepFn)                              \
  X(ops::adam_step_kernel, ops::AdamStepFn)                                \
  X(ops::multi_tensor_unscale_norm_kernel, ops::MultiTensorUnscaleNormFn)  \
  X(ops::multi_tensor_scale_kernel, ops::MultiTensorScaleFn)

}  // namespace

void install_complete_loopback() {
  // Before any tensor lives there: memory from before would not be mapped twice.
  instance().poison();
  install_loopback();
#define QK_SET(table, Fn) table.set(DeviceType::privateuse1, &Forward<table, Fn>::call);
  QK_LOOPBACK_MORE_KERNELS(QK_SET)
#undef QK_SET
}

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
