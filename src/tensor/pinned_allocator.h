// A caching allocator for page-locked host memory (Tensor::pin_memory, the
// staging of non-blocking copies), shared by every GPU backend as
// device_allocator.h is. What PyTorch's CachingHostAllocator does:
//
//   * Pinning and unpinning are slow, and freeing (cudaFreeHost) waits for
//     the whole device, so freed blocks are kept and handed out again:
//     sizes round up to a power of two (at least 4 KiB), blocks are not split.
//   * A block an asynchronous copy used may still be read or written by the
//     device after its tensor is gone: each such use is marked with an event
//     on the copy's stream (record_use, called by the backend's copy_async),
//     and a freed block is handed out again only once all its events are done.
//
// The runtime calls go through RawPinnedMemory, so the pools and the event
// rule are tested on the CPU with a fake runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "stream_events.h"

namespace qk {

// What a vendor runtime provides to the pinned allocator (and its events).
class RawPinnedMemory : public StreamEvents {
 public:
  // Fresh page-locked memory, or nullptr when none can be had.
  virtual void* raw_alloc_pinned(size_t bytes) = 0;
  virtual void raw_free_pinned(void* p) = 0;
};

struct PinnedMemoryStats {
  uint64_t reserved = 0;    // bytes of pinned blocks held: in use and cached
  uint64_t cached = 0;      // of those, free in the pools
  uint64_t in_use = 0;      // blocks handed out and not freed
  uint64_t num_allocs = 0;  // allocate() calls
  uint64_t pool_hits = 0;   // ... served from the pools
  uint64_t waited_for = 0;  // times a cached block was passed over: a copy still used it
};

class CachingPinnedAllocator {
 public:
  explicit CachingPinnedAllocator(RawPinnedMemory& raw) : raw_(raw) {}
  ~CachingPinnedAllocator();  // releases the cached blocks whose uses are done
  CachingPinnedAllocator(const CachingPinnedAllocator&) = delete;
  CachingPinnedAllocator& operator=(const CachingPinnedAllocator&) = delete;

  // A block of at least `bytes`; nullptr when the runtime has none to give
  // (after releasing the cached blocks it could).
  void* allocate(size_t bytes);
  // p from allocate: back to the pool (reused once its recorded uses are done).
  void free(void* p);
  // An asynchronous copy on `stream` reads or writes memory at p: its block
  // is not handed out again before the copy is done. False when p is not in
  // a block of this allocator (nothing recorded).
  bool record_use(const void* p, void* stream);
  bool owns(const void* p) const;
  // Releases the cached blocks whose uses are done.
  void empty_cache();
  PinnedMemoryStats stats() const;

  static size_t size_class(size_t bytes);

 private:
  struct Block {
    size_t size = 0;
    bool in_use = false;
    std::vector<void*> events;  // uses not yet known to be done
  };
  // Destroys the done events of b; true when none is left.
  bool uses_done(Block& b);
  void release(std::map<uintptr_t, Block>::iterator it);

  RawPinnedMemory& raw_;
  mutable std::mutex mu_;
  std::map<uintptr_t, Block> blocks_;  // by start address, for record_use's lookup
  PinnedMemoryStats stats_;
};

}  // namespace qk
