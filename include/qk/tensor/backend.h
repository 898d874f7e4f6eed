// A device backend: a small table of functions (allocate, copy, synchronize,
// describe), one per DeviceType. The CPU backend is always present; CUDA and
// another vendor's GPU register theirs at start-up, so callers never change.
//
// Kernels are not here: each op has a KernelTable (see dispatch.h) in which a
// backend registers the kernels it supports; an op a backend lacks raises a
// clear "not implemented for <device>" error (ggml's supports_op).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "qk/tensor/device.h"

namespace qk {

struct MemoryStats {
  uint64_t allocated = 0;       // bytes held by live tensors now
  uint64_t peak_allocated = 0;  // high-water mark since the last reset
  uint64_t num_allocs = 0;
  uint64_t reserved = 0;  // bytes the backend holds from the device: live and cached
  uint64_t cached = 0;    // of those, free for reuse (a caching allocator's pools)
};

// The device work a callable queued, recorded once and replayed (a CUDA
// graph): replay() queues the same kernels and copies, on the same memory,
// on the device's current stream; the host code that queued them does not
// run again. Memory the recorded work uses stays the graph's while it lives.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  virtual void replay() = 0;
  // Kernels and copies recorded (for logs and tests).
  virtual int64_t num_nodes() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceType type() const = 0;
  virtual int device_count() const = 0;
  virtual std::string device_name(int index) const = 0;
  virtual uint64_t total_memory(int index) const = 0;

  virtual void* allocate(size_t nbytes, int index) = 0;
  virtual void deallocate(void* p, size_t nbytes, int index) = 0;
  // Copies between this backend's memory and the host (or within the device).
  // Either side may be the CPU. Returns once the host may read, write or
  // free its side.
  virtual void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes) = 0;
  // As copy, but it may return before the bytes have moved: ordered on the
  // device's current stream, with the host side pinned (allocate_pinned) and
  // left alone until the stream has got there (synchronize, an event). By
  // default the blocking copy.
  virtual void copy_async(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes) {
    copy(dst, dst_dev, src, src_dev, nbytes);
  }
  // Page-locked host memory this backend's devices copy to and from without
  // staging (Tensor::pin_memory); nullptr where the backend has none (the
  // caller says why: unavailable_reason()). Freed by deallocate_pinned.
  virtual void* allocate_pinned(size_t /*nbytes*/) { return nullptr; }
  virtual void deallocate_pinned(void* /*p*/) {}
  virtual void synchronize(int index) = 0;
  // Marks the work queued so far on the calling thread's current stream of
  // device `index`; the callable returned blocks, on any thread, until the
  // device has done it (a CUDA event). For handing a tensor to an engine that
  // runs on a stream of its own (NCCL) without stalling the caller. By
  // default: synchronize now, and the callable has nothing left to wait for.
  virtual std::function<void()> record_fence(int index) {
    synchronize(index);
    return [] {};
  }
  // Makes `index` the calling thread's current device of this backend (for
  // a thread of another library that will call the vendor's runtime, such
  // as qccl's progress thread calling NCCL). By default nothing.
  virtual void set_current_device(int /*index*/) {}

  virtual MemoryStats memory_stats(int index) const = 0;
  virtual void reset_peak_memory(int index) = 0;
  // Gives cached blocks back to the device (a caching allocator's empty_cache).
  virtual void empty_cache(int /*index*/) {}
  // One line on the device for `qk check` (compute capability, driver and
  // runtime versions ...); "" when there is nothing more than name and memory.
  virtual std::string device_details(int /*index*/) const { return ""; }
  // Why device_count() is 0 ("" when it is not): no driver, no device, ...
  virtual std::string unavailable_reason() const { return device_count() > 0 ? "" : "no device"; }
  // Records the work `fn` queues on device `index` (its current stream)
  // into a graph, without running it. Anything in fn that needs the device's
  // results on the host (a copy to the host, a synchronisation) cannot be
  // recorded and throws DeviceError saying what, as does a device whose
  // backend cannot record (this default).
  virtual std::unique_ptr<DeviceGraph> capture_graph(int index, const std::function<void()>& fn);
  // Whether device `index` is recording now (on the calling thread).
  virtual bool capturing(int /*index*/) const { return false; }
};

// The backend for a device type; throws DeviceError when none is registered
// (e.g. "cuda" in a CPU-only build).
Backend& backend(DeviceType t);
bool has_backend(DeviceType t);
// Registers (or replaces) a backend. The caller keeps ownership; it must live
// as long as tensors on it do.
void register_backend(Backend* b);

// Memory of the device, for `qk check`, benchmarks and training logs.
// Throws DeviceError unless `d` can be used here: its backend is in this
// program and the machine shows the device ("cuda:0 is not available:
// <the runtime's reason>", "cuda:7 does not exist: ...").
void check_device_usable(Device d);

MemoryStats memory_stats(Device d);
void reset_peak_memory(Device d);
void empty_cache(Device d);
// Backend::record_fence of d's backend (on the CPU: nothing to wait for).
std::function<void()> record_fence(Device d);
// Waits for everything queued on d (nothing to do on the CPU).
void synchronize(Device d);
// Backend::capture_graph of d's backend (the CPU has none: DeviceError).
std::unique_ptr<DeviceGraph> capture_graph(Device d, const std::function<void()>& fn);
// Whether d is recording a graph now (never on the CPU).
bool capturing(Device d);

// A device as a program's --device flag names it ("cpu", "cuda", "cuda:N",
// the privateuse1 name), checked usable here (check_device_usable). A device
// type without an index means the process's local rank's device, as
// torchrun's LOCAL_RANK: cuda:3 for local rank 3. ValueError for a spec that
// names no device, DeviceError (saying which rank asked) when it cannot be used.
Device resolve_device(const std::string& spec, int local_rank = 0);

}  // namespace qk
