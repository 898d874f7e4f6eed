// The CUDA backend: devices through the CUDA runtime, memory through the
// caching allocator (device_allocator.h), copies and kernels on the current
// stream (qk/tensor/cuda/stream.h). Registered when the
// program starts, through qianka::tensor_cuda (a whole-archive link), so a
// build without CUDA never mentions it.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "cuda_check.h"
#include "deferred_checks.h"
#include "device_allocator.h"
#include "graph.h"
#include "pinned_allocator.h"
#include "stream_handle.h"
#include "qk/base/error.h"
#include "qk/tensor/sync_debug.h"
#include "qk/tensor/backend.h"
#include "qk/tensor/tensor.h"

namespace qk::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  cudaGetLastError();  // clears a sticky-free error so the next call does not report it again
  throw DeviceError(std::string("CUDA call ") + call + " failed: " + cudaGetErrorName(e) + " (" +
                        cudaGetErrorString(e) + ")",
                    file, line);
}

namespace {

// Whether p is page-locked host memory the runtime knows (cudaHostAlloc'd
// or registered): a copy from it returns before the DMA has read it.
bool is_pinned_host(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // not an error to keep
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}

// 13000 -> "13.0".
std::string version_str(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

// The driver's own version ("580.159.03") from NVML, loaded at run time so
// that nothing links the driver's library; "" where it cannot be loaded.
std::string nvml_driver_version() {
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return "";
  using InitFn = int (*)();
  using VersionFn = int (*)(char*, unsigned);
  auto init = reinterpret_cast<InitFn>(::dlsym(lib, "nvmlInit_v2"));
  auto version = reinterpret_cast<VersionFn>(::dlsym(lib, "nvmlSystemGetDriverVersion"));
  auto shutdown = reinterpret_cast<InitFn>(::dlsym(lib, "nvmlShutdown"));
  char buf[96] = {};
  std::string out;
  if (init && version && init() == 0) {  // 0: NVML_SUCCESS
    if (version(buf, sizeof buf) == 0) out = buf;
    if (shutdown) shutdown();
  }
  ::dlclose(lib);
  return out;
}

class CudaBackend final : public Backend, public RawDeviceMemory, public RawPinnedMemory {
 public:
  DeviceType type() const override { return DeviceType::cuda; }

  int device_count() const override {
    probe();
    return count_;
  }
  std::string unavailable_reason() const override {
    probe();
    return count_ > 0 ? std::string() : reason_;
  }

  std::string device_name(int index) const override {
    check_index(index);
    cudaDeviceProp p;
    QK_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
    return p.name;
  }
  uint64_t total_memory(int index) const override {
    check_index(index);
    size_t free_bytes = 0, total = 0;
    DeviceGuard g(index);
    QK_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return total;
  }

  std::string device_details(int index) const override {
    check_index(index);
    cudaDeviceProp p;
    QK_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    std::string nvml = nvml_driver_version();
    return "compute capability " + std::to_string(p.major) + "." + std::to_string(p.minor) + ", " +
           std::to_string(p.multiProcessorCount) + " multiprocessors, " + std::to_string(p.l2CacheSize >> 20) +
           " MiB L2; driver " + (nvml.empty() ? std::string("(NVML not loaded)") : nvml) + " for CUDA " +
           version_str(driver) + ", runtime " + version_str(runtime);
  }

  void* allocate(size_t nbytes, int index) override {
    check_index(index);
    DeviceGuard g(index);
    // Keyed by the current stream: the block is reused only in its order.
    return alloc_.allocate(nbytes, index, current_stream_id(index));
  }
  void deallocate(void* p, size_t, int) override { alloc_.free(p); }

  void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes) override {
    if (nbytes == 0) return;
    const int device = dst_dev.is_cpu() ? src_dev.index : dst_dev.index;
    if (cuda::capturing(device)) {
      QK_CHECK_DEVICE(!src_dev.is_cpu(), "cuda:", device,
                      ": a blocking copy from host memory cannot be recorded in a graph (the graph would read the "
                      "host buffer at each replay); copy inputs to the device before the capture");
      if (dst_dev.is_cpu()) note_host_sync(src_dev, "a copy to the host");  // refuses it, naming it
    }
    DeviceGuard g(device);
    cudaStream_t s = current_stream_handle(device);
    // A copy to the host waits for the device: the input checks queued
    // since the last wait are read with it (deferred_checks.h).
    PendingChecks checks = dst_dev.is_cpu() ? PendingChecks(device, s) : PendingChecks(-1, s);
    // From pageable host memory the call returns once the source is staged;
    // from pinned memory at once, the DMA reading it later: wait then too.
    QK_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, s));
    // The host reads what it copied out as soon as this returns.
    if (dst_dev.is_cpu() || (src_dev.is_cpu() && is_pinned_host(src))) {
      note_host_sync(Device(DeviceType::cuda, device), dst_dev.is_cpu() ? "a copy to the host" : "a blocking copy from pinned memory");
      QK_CUDA_CHECK(cudaStreamSynchronize(s));
    }
    checks.raise();
  }

  void copy_async(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes) override {
    if (nbytes == 0) return;
    const int device = dst_dev.is_cpu() ? src_dev.index : dst_dev.index;
    QK_CHECK_DEVICE(!cuda::capturing(device) || (!src_dev.is_cpu() && !dst_dev.is_cpu()), "cuda:", device,
                    ": a copy between host and device cannot be recorded in a graph (the host side would be read "
                    "or written at each replay); move data before the capture and read results after replay()");
    DeviceGuard g(device);
    cudaStream_t s = current_stream_handle(device);
    QK_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, s));
    // The host side may be a cached pinned block: not handed out again
    // before this copy is done.
    (void)pinned_.record_use(dst_dev.is_cpu() ? dst : src, s);
  }

  // From the pinned cache (pinned_allocator.h): cudaHostAlloc'd blocks
  // (portable, so any device's copies use them without staging), kept after
  // their tensors die instead of cudaFreeHost, which waits for the device.
  void* allocate_pinned(size_t nbytes) override {
    if (device_count() == 0) return nullptr;
    return pinned_.allocate(nbytes);
  }
  void deallocate_pinned(void* p) override { pinned_.free(p); }

  // RawPinnedMemory: what the pinned cache asks of the runtime.
  void* raw_alloc_pinned(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    QK_CUDA_CHECK(e);
    return p;
  }
  void raw_free_pinned(void* p) override { (void)cudaFreeHost(p); }
  void* record_event(void* stream) override {
    cudaEvent_t ev = nullptr;
    QK_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    const cudaError_t e = cudaEventRecord(ev, static_cast<cudaStream_t>(stream));
    if (e != cudaSuccess) (void)cudaEventDestroy(ev);
    QK_CUDA_CHECK(e);
    return ev;
  }
  bool event_done(void* event) override {
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    QK_CUDA_CHECK(e);
    return true;
  }
  void destroy_event(void* event) override { (void)cudaEventDestroy(static_cast<cudaEvent_t>(event)); }

  std::unique_ptr<DeviceGraph> capture_graph(int index, const std::function<void()>& fn) override {
    check_index(index);
    return cuda::capture_graph(index, fn, alloc_);
  }
  bool capturing(int index) const override { return cuda::capturing(index); }

  // Also RawDeviceMemory's: the caching allocator's wait before it releases blocks.
  void synchronize(int index) override {
    check_index(index);
    QK_CHECK_DEVICE(!cuda::capturing(index), "cuda:", index,
                    ": synchronize() cannot be recorded in a graph (nothing recorded has run yet); synchronize "
                    "after replay()");
    DeviceGuard g(index);
    PendingChecks checks(index, current_stream_handle(index));
    QK_CUDA_CHECK(cudaDeviceSynchronize());
    checks.raise();
  }

  void set_current_device(int index) override {
    check_index(index);
    QK_CUDA_CHECK(cudaSetDevice(index));
  }

  // An event on the current stream; the returned callable owns it.
  std::function<void()> record_fence(int index) override {
    check_index(index);
    DeviceGuard g(index);
    cudaEvent_t ev = nullptr;
    QK_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    std::shared_ptr<CUevent_st> owned(ev, [](cudaEvent_t e) { (void)cudaEventDestroy(e); });
    QK_CUDA_CHECK(cudaEventRecord(ev, current_stream_handle(index)));
    return [owned] { QK_CUDA_CHECK(cudaEventSynchronize(owned.get())); };
  }

  MemoryStats memory_stats(int index) const override {
    DeviceMemoryStats s = alloc_.stats(index);
    MemoryStats m;
    m.allocated = s.allocated;
    m.peak_allocated = s.peak_allocated;
    m.num_allocs = s.num_allocs;
    m.reserved = s.reserved;
    m.cached = s.cached;
    return m;
  }
  void reset_peak_memory(int index) override { alloc_.reset_peak(index); }
  void retire_stream(uint64_t id) { alloc_.retire_stream(id); }
  void record_stream(void* block, uint64_t id, void* handle) { alloc_.record_stream(block, id, handle); }
  void empty_cache(int index) override {
    check_index(index);
    DeviceGuard g(index);
    alloc_.empty_cache(index);
    pinned_.empty_cache();
  }

  // RawDeviceMemory: what the caching allocator asks of the runtime.
  void* raw_alloc(size_t bytes, int device) override {
    void* p = nullptr;
    cudaError_t e;
    if (cuda::capturing(device)) {
      // cudaMalloc is a "potentially unsafe" call during a capture (it is not
      // recorded); here it is safe, the block staying the graph's while it
      // lives, so the thread's capture mode is relaxed around it (as PyTorch's
      // allocator does).
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      QK_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
      e = cudaMalloc(&p, bytes);
      (void)cudaThreadExchangeStreamCaptureMode(&mode);
    } else {
      e = cudaMalloc(&p, bytes);
    }
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    QK_CUDA_CHECK(e);
    return p;
  }
  void raw_free(void* p, int index) override {
    DeviceGuard g(index);
    cudaFree(p);  // at exit the driver may be gone already; nothing to do about it then
  }
  uint64_t total_bytes(int index) override { return total_memory(index); }
  std::string label(int index) override { return "cuda:" + std::to_string(index) + " (" + device_name(index) + ")"; }

 private:
  void probe() const {
    std::call_once(probed_, [this] {
      int n = 0;
      cudaError_t e = cudaGetDeviceCount(&n);
      if (e != cudaSuccess) {
        cudaGetLastError();
        reason_ = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
        n = 0;
      } else if (n == 0) {
        reason_ = "cudaGetDeviceCount found no device";
      }
      count_ = n;
    });
  }
  void check_index(int index) const { check_device_usable(Device(DeviceType::cuda, index)); }

  mutable std::once_flag probed_;
  mutable int count_ = 0;
  mutable std::string reason_;
  mutable CachingDeviceAllocator alloc_{*this};
  CachingPinnedAllocator pinned_{*this};
};

CudaBackend& the_backend() {
  static CudaBackend* b = new CudaBackend;  // never destroyed: tensors may outlive static destruction
  return *b;
}

}  // namespace

void stream_retired(uint64_t id) { the_backend().retire_stream(id); }

void record_stream(const Tensor& t, const Stream& s) {
  QK_CHECK_DEVICE(t.defined() && t.device().type == DeviceType::cuda, "record_stream: expected a cuda tensor, got ",
                  t.defined() ? "one on " + t.device().str() : std::string("an undefined one"));
  QK_CHECK_DEVICE(t.device().index == s.device(), "record_stream: the tensor is on ", t.device().str(),
                  ", the stream on cuda:", s.device());
  the_backend().record_stream(t.storage()->data(), s.id(), reinterpret_cast<void*>(s.handle()));
}

namespace {

[[maybe_unused]] const bool registered = (register_backend(&the_backend()), true);  // its kernels: elementwise_ops.cc, ...

}  // namespace

}  // namespace qk::cuda
