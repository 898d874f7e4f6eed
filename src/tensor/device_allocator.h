// A caching allocator for accelerator memory, shared by every GPU backend
// (cuda/ now; a MUSA or ROCm folder beside it plugs its runtime in the same
// way). What PyTorch's CUDA caching allocator does, in its simplest form:
//
//   * Device allocation and freeing are slow and synchronise the device, so
//     freed blocks are kept in pools and handed to the next request of the
//     same size class on the same device and stream.
//   * Size classes: 512 B, then four per power of two (x, 1.25x, 1.5x,
//     1.75x), so a block wastes at most a fifth of itself and a training
//     step's recurring shapes hit the pools. Blocks are not split.
//   * Streams: a block freed on stream S is reused only by allocations on S
//     (work queued on S before the free finishes before work queued after
//     it). A block also used on another stream T (record_stream, as torch's
//     Tensor.record_stream) gets an event on T when it is freed and goes
//     back to S's pool only once that event is done. Streams are named by ids that
//     are never reused (a runtime may reuse a destroyed stream's handle);
//     retire_stream(S), once S's work is done, moves its cached blocks and
//     any later frees to the default stream.
//   * Graph capture (CUDA graphs): the recorded work reads and writes the
//     same addresses at every replay, so while a capture on stream G is
//     open, blocks made before it and freed during it are kept for the
//     graph instead of pooled, and G's pool (blocks made and freed within
//     the capture, reused in its order) is not given back to the device
//     while the graph lives (PyTorch's private graph pool).
//   * Out of memory: the device's cached blocks are released (after a
//     device synchronisation) and the allocation retried once; if it still
//     fails, OutOfMemoryError says what was asked, what tensors hold, what
//     was cached and what the device has.
//
// The runtime calls go through RawDeviceMemory, so the pools, the statistics
// and the out-of-memory path are tested on the CPU with a fake device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "stream_events.h"

namespace qk {

// What a vendor runtime provides to the allocator (and its events, for
// record_stream).
class RawDeviceMemory : public StreamEvents {
 public:
  // A fresh block, or nullptr when the device is out of memory (any other
  // failure throws DeviceError).
  virtual void* raw_alloc(size_t bytes, int device) = 0;
  virtual void raw_free(void* p, int device) = 0;
  // Waits for all work on the device (before cached blocks are released).
  virtual void synchronize(int device) = 0;
  // For messages: the device's memory and its name ("cuda:0 (NVIDIA H200)").
  virtual uint64_t total_bytes(int device) = 0;
  virtual std::string label(int device) = 0;
};

// Per device.
struct DeviceMemoryStats {
  uint64_t allocated = 0;       // bytes tensors asked for, live now
  uint64_t peak_allocated = 0;  // high-water mark since reset_peak
  uint64_t reserved = 0;        // bytes of device blocks held: in use and cached
  uint64_t cached = 0;          // of those, free in the pools
  uint64_t num_allocs = 0;      // allocate() calls
  uint64_t pool_hits = 0;       // ... served from the pools
  uint64_t device_allocs = 0;   // raw_alloc calls that returned memory
  uint64_t oom_retries = 0;     // times the cache was released to retry
};

class CachingDeviceAllocator {
 public:
  using Stream = uint64_t;  // a stream's id, unique in the process (0: the default stream)

  explicit CachingDeviceAllocator(RawDeviceMemory& raw) : raw_(raw) {}
  ~CachingDeviceAllocator();  // releases the cached blocks (not the live ones)
  CachingDeviceAllocator(const CachingDeviceAllocator&) = delete;
  CachingDeviceAllocator& operator=(const CachingDeviceAllocator&) = delete;

  // A block of at least `bytes` (0 allowed) on `device` for work on `stream`.
  void* allocate(size_t bytes, int device, Stream stream);
  // p from allocate; its block goes back to its device's and stream's pool.
  void free(void* p);
  // Releases every cached block of the device (after synchronising it).
  void empty_cache(int device);
  // S is destroyed and its work done: its cached blocks, and blocks
  // allocated on it and freed later, go to the default stream's pools.
  void retire_stream(Stream s);
  // Work on stream `s` (the runtime's `handle`) uses p, a live block from
  // allocate: when p is freed, it is reused only after that work is done.
  void record_stream(void* p, Stream s, void* handle);

  // Graph capture on stream `g` of `device` (one at a time per device).
  void begin_capture(int device, Stream g);
  // Ends it: the blocks kept for the graph (made before, freed during).
  std::vector<void*> end_capture(int device);
  // The graph is gone and its work done: its kept blocks go back to their
  // pools and g's pool may be given back again (retire g afterwards).
  void release_graph(Stream g, const std::vector<void*>& kept);

  DeviceMemoryStats stats(int device) const;
  void reset_peak(int device);

  // The bytes a request of `bytes` gets (its size class).
  static size_t size_class(size_t bytes);

 private:
  struct Live {
    size_t asked, block;
    int device;
    Stream stream;
    std::vector<std::pair<Stream, void*>> used_on;  // other streams (id, handle), from record_stream
  };
  // A freed block waiting for the events of the other streams that used it.
  struct Pending {
    void* p;
    int device;
    Stream stream;
    size_t block;
    std::vector<void*> events;
  };
  struct PoolKey {
    int device;
    Stream stream;
    size_t block;
    bool operator==(const PoolKey&) const = default;
  };
  struct PoolKeyHash {
    size_t operator()(const PoolKey& k) const;
  };
  DeviceMemoryStats& stats_of(int device);
  void release_cached_locked(int device);
  void pool_locked(void* p, int device, Stream stream, size_t block);
  // Moves the pending blocks whose events are all done into their pools.
  void settle_pending_locked();

  RawDeviceMemory& raw_;
  mutable std::mutex mu_;
  std::unordered_map<void*, Live> live_;
  std::unordered_map<PoolKey, std::vector<void*>, PoolKeyHash> pools_;
  std::unordered_set<Stream> retired_;
  std::unordered_map<int, Stream> capturing_;       // device -> its open capture's stream
  std::unordered_map<void*, Live> kept_;            // blocks kept for graphs
  std::unordered_map<int, std::vector<void*>> kept_now_;  // device -> kept by its open capture
  std::unordered_set<Stream> private_;              // graph streams: pools never released
  std::vector<Pending> pending_;
  std::vector<DeviceMemoryStats> stats_;  // by device index
};

}  // namespace qk
