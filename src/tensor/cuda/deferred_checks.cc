// The deferred input checks (deferred_checks.h): a queue per device, read in
// one batch of 8-byte copies into pinned memory before the host's next wait.
#include "deferred_checks.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "cuda_check.h"
#include "qk/base/error.h"
#include "qk/tensor/sync_debug.h"

namespace qk::cuda {

namespace {

constexpr size_t kMaxPending = 1024;
constexpr int kMaxDevices = 64;
constexpr uint64_t kNone = ~uint64_t(0);

struct Entry {
  Tensor flag;  // held: its block is not reused before it is read
  cudaStream_t stream = nullptr;
  std::function<std::string(int64_t)> describe;
};

struct DeviceQueue {
  std::mutex mu;
  std::vector<Entry> entries;
};

DeviceQueue& queue(int device) {
  static DeviceQueue queues[kMaxDevices];
  QK_CHECK_DEVICE(device >= 0 && device < kMaxDevices, "deferred checks: device index ", device,
                  " is beyond the ", kMaxDevices, " this build tracks");
  return queues[device];
}

std::atomic<int64_t> pending{0};  // over all devices: the common case, none, costs one load

// Pinned memory for the flags' values, one buffer per thread, grown as needed
// (a copy to pageable memory would wait for the device by itself).
uint64_t* slots(size_t n) {
  struct Slots {
    uint64_t* p = nullptr;
    size_t n = 0;
    ~Slots() {
      if (p) (void)cudaFreeHost(p);  // at exit the driver may be gone already
    }
  };
  thread_local Slots s;
  if (s.n < n) {
    if (s.p) (void)cudaFreeHost(s.p);
    s.p = nullptr;
    const size_t m = std::max<size_t>(n, 64);
    QK_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&s.p), m * sizeof(uint64_t), cudaHostAllocPortable));
    s.n = m;
  }
  return s.p;
}

}  // namespace

Tensor new_error_flag(const Tensor& like, cudaStream_t stream) {
  Tensor flag = empty({1}, TensorOptions().dtype(DType::i64).device(like.device()));
  QK_CUDA_CHECK(cudaMemsetAsync(flag.raw_data(), 0xff, sizeof(int64_t), stream));
  return flag;
}

struct PendingChecks::Impl {
  Device device;
  std::vector<Entry> entries;
  uint64_t* values = nullptr;
};

PendingChecks::PendingChecks(int device, cudaStream_t stream) {
  if (device < 0 || pending.load(std::memory_order_acquire) == 0) return;
  DeviceQueue& q = queue(device);
  std::vector<Entry> taken;
  {
    std::lock_guard<std::mutex> lock(q.mu);
    taken.swap(q.entries);
  }
  if (taken.empty()) return;
  pending.fetch_sub(static_cast<int64_t>(taken.size()), std::memory_order_acq_rel);
  impl_ = std::make_shared<Impl>();
  impl_->device = Device(DeviceType::cuda, device);
  impl_->values = slots(taken.size());
  std::vector<cudaStream_t> others;
  for (size_t i = 0; i < taken.size(); ++i) {
    QK_CUDA_CHECK(cudaMemcpyAsync(&impl_->values[i], taken[i].flag.raw_data(), sizeof(uint64_t),
                                  cudaMemcpyDeviceToHost, taken[i].stream));
    if (taken[i].stream != stream && std::find(others.begin(), others.end(), taken[i].stream) == others.end())
      others.push_back(taken[i].stream);
  }
  // Checks left on another stream: the caller waits for its own only.
  for (cudaStream_t s : others) {
    note_host_sync(impl_->device, "input checks left on another stream");
    QK_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  impl_->entries = std::move(taken);
}

void PendingChecks::raise() {
  if (!impl_) return;
  const std::shared_ptr<Impl> done = std::move(impl_);
  // Read every value before describe() may copy from the device itself
  // (which reuses this thread's slots).
  std::vector<uint64_t> values(done->values, done->values + done->entries.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] == kNone) continue;
    const std::string what = done->entries[i].describe(static_cast<int64_t>(values[i]) - 1);
    QK_THROW(IndexError, what, " (found when the host next waited for ", done->device.str(),
             "; the op was queued before it)");
  }
}

namespace {
thread_local std::vector<RecordedCheck>* check_sink = nullptr;
}  // namespace

void set_check_sink(std::vector<RecordedCheck>* sink) { check_sink = sink; }

void defer_recorded_checks(const std::vector<RecordedCheck>& checks, cudaStream_t stream) {
  for (const RecordedCheck& c : checks) defer_check(c.flag, stream, c.describe);
}

void defer_check(const Tensor& flag, cudaStream_t stream, std::function<std::string(int64_t pos)> describe) {
  if (check_sink) {
    check_sink->push_back({flag, std::move(describe)});
    return;
  }
  const int device = flag.device().index;
  size_t n = 0;
  {
    DeviceQueue& q = queue(device);
    std::lock_guard<std::mutex> lock(q.mu);
    q.entries.push_back({flag, stream, std::move(describe)});
    n = q.entries.size();
  }
  pending.fetch_add(1, std::memory_order_acq_rel);
  if (n < kMaxPending) return;
  // Many checks and no read-back: read them now rather than hold their flags.
  PendingChecks checks(device, stream);
  note_host_sync(flag.device(), "pending input checks");
  QK_CUDA_CHECK(cudaStreamSynchronize(stream));
  checks.raise();
}

}  // namespace qk::cuda
