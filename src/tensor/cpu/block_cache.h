// Large host blocks kept after they are freed, for the next allocation of the
// same size (the CPU backend's allocator for tensors of min_bytes and more).
//
// Why: a training or inference step allocates the same activation shapes
// every iteration. Through malloc, each large block is a fresh mapping (or a
// heap range glibc trimmed back), so every 4 KiB page faults again on first
// touch: ResNet-18 inference at batch 64 spent ~15% of its time in the
// kernel's page-fault path. A cached block is reused with its pages already
// mapped.
//
// Memory bound: live + cached bytes never exceed the peak of live bytes (the
// high-water mark of blocks in use), so the cache does not raise peak RSS
// above what the program's tensors needed at their peak. On a miss, cached
// blocks are unmapped, oldest first, only as far as needed to keep that bound
// with the new block: evicting more would make the next step's allocations
// of other sizes miss and fault again. Blocks are matched by size class:
// pages, then up to an eighth of a power of two (sizes that vary a little
// between calls, as an MoE layer's routed rows do, share a class), and on a
// miss the smallest cached block under twice the size serves. (In a
// network whose activations halve stage by stage, exact classes would need
// about twice the peak to never miss; the misses
// left are cheap because blocks of 4 MiB and more are mapped as transparent
// huge pages: one fault per 2 MiB.)
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <unordered_map>

namespace qk::cpu {

class BlockCache {
 public:
  // enabled = false: every free unmaps at once (no reuse).
  BlockCache(size_t min_bytes, bool enabled) : min_bytes_(min_bytes), enabled_(enabled) {}
  ~BlockCache() { release_all(); }
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // Whether blocks of nbytes come from here (callers use malloc otherwise).
  bool handles(size_t nbytes) const { return nbytes >= min_bytes_; }
  // A 256-byte aligned block of at least nbytes (at a varying offset in its
  // first page); nullptr when the system is out of memory even after
  // emptying the cache.
  void* allocate(size_t nbytes);
  // p from allocate(nbytes), the same nbytes.
  void deallocate(void* p, size_t nbytes);
  // Unmaps every cached block.
  void release_all();

  size_t cached_bytes() const;
  size_t hits() const;

  // The bytes a block for nbytes takes: whole pages, plus one for the offset, up to its size class.
  static size_t round_up(size_t nbytes);

 private:
  struct Block {
    size_t size;
    void* p;
  };
  // Unmaps cached blocks, oldest first, until `want` bytes are freed or none
  // is left. Called with mu_ held.
  void evict(size_t want);
  void release_all_locked();

  const size_t min_bytes_;
  const bool enabled_;
  mutable std::mutex mu_;
  std::list<Block> free_;  // oldest first
  std::unordered_map<void*, size_t> larger_;  // live blocks handed out for a smaller request: their size
  size_t cached_ = 0, hits_ = 0;
  size_t live_ = 0, peak_live_ = 0;  // bytes of blocks handed out, and their high-water mark
  size_t colours_ = 0;
};

}  // namespace qk::cpu
