#include "qk/tensor/cuda/stream.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <vector>

#include "cuda_check.h"
#include "deferred_checks.h"
#include "stream_handle.h"

namespace qk::cuda {

namespace {

thread_local std::vector<Stream> current;  // by device; missing: the legacy default

}  // namespace

struct Stream::Owned {
  cudaStream_t s = nullptr;
  int device = 0;
  uint64_t id = 0;
  // No throwing here (a destructor): errors at teardown are ignored.
  ~Owned() {
    int prev = 0;
    cudaGetDevice(&prev);
    if (prev != device) cudaSetDevice(device);
    // Its work done before its cached blocks serve the default stream.
    if (cudaStreamSynchronize(s) == cudaSuccess) stream_retired(id);
    cudaStreamDestroy(s);
    if (prev != device) cudaSetDevice(prev);
  }
};

Stream Stream::create(int device, bool non_blocking) {
  Stream st(device);
  DeviceGuard d(device);
  static std::atomic<uint64_t> next_id{1};
  auto o = std::make_shared<Owned>();
  o->device = device;
  o->id = next_id.fetch_add(1);
  QK_CUDA_CHECK(cudaStreamCreateWithFlags(&o->s, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault));
  st.owned_ = std::move(o);
  return st;
}

uintptr_t Stream::handle() const { return owned_ ? reinterpret_cast<uintptr_t>(owned_->s) : 0; }
uint64_t Stream::id() const { return owned_ ? owned_->id : 0; }

void Stream::synchronize() const {
  DeviceGuard d(device_);
  PendingChecks checks(device_, stream_handle(*this));
  QK_CUDA_CHECK(cudaStreamSynchronize(stream_handle(*this)));
  checks.raise();
}

bool Stream::query() const {
  DeviceGuard d(device_);
  cudaError_t e = cudaStreamQuery(stream_handle(*this));
  if (e == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  QK_CUDA_CHECK(e);
  return true;
}

void Stream::wait(const Event& e) const {
  DeviceGuard d(device_);
  QK_CUDA_CHECK(cudaStreamWaitEvent(stream_handle(*this), reinterpret_cast<cudaEvent_t>(e.handle()), 0));
}

Stream current_stream(int device) {
  if (device >= 0 && static_cast<size_t>(device) < current.size()) return current[device];
  return Stream(device);
}

void set_current_stream(const Stream& s) {
  if (static_cast<size_t>(s.device()) >= current.size())
    for (int d = static_cast<int>(current.size()); d <= s.device(); ++d) current.push_back(Stream(d));
  current[s.device()] = s;
}

DeviceGuard::DeviceGuard(int device) : now_(device) {
  QK_CUDA_CHECK(cudaGetDevice(&prev_));
  if (prev_ != device) QK_CUDA_CHECK(cudaSetDevice(device));
}
DeviceGuard::~DeviceGuard() {
  if (prev_ != now_) cudaSetDevice(prev_);
}

cudaStream_t stream_handle(const Stream& s) { return reinterpret_cast<cudaStream_t>(s.handle()); }
cudaStream_t current_stream_handle(int device) { return stream_handle(current_stream(device)); }

uint64_t current_stream_id(int device) {
  if (device < 0 || static_cast<size_t>(device) >= current.size()) return 0;
  return current[device].id();
}

struct Event::Owned {
  cudaEvent_t e = nullptr;
  ~Owned() { cudaEventDestroy(e); }
};

Event::Event(bool timing) : owned_(std::make_shared<Owned>()) {
  QK_CUDA_CHECK(cudaEventCreateWithFlags(&owned_->e, timing ? cudaEventDefault : cudaEventDisableTiming));
}

void Event::record(const Stream& s) {
  DeviceGuard d(s.device());
  QK_CUDA_CHECK(cudaEventRecord(owned_->e, stream_handle(s)));
}

void Event::synchronize() const { QK_CUDA_CHECK(cudaEventSynchronize(owned_->e)); }

bool Event::query() const {
  cudaError_t e = cudaEventQuery(owned_->e);
  if (e == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  QK_CUDA_CHECK(e);
  return true;
}

float Event::elapsed_ms(const Event& end) const {
  float ms = 0;
  QK_CUDA_CHECK(cudaEventElapsedTime(&ms, owned_->e, end.owned_->e));
  return ms;
}

uintptr_t Event::handle() const { return reinterpret_cast<uintptr_t>(owned_->e); }

}  // namespace qk::cuda
