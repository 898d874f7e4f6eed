#include "device_allocator.h"

#include <algorithm>
#include <bit>

#include "qk/base/error.h"
#include "qk/base/timer.h"

namespace qk {

size_t CachingDeviceAllocator::size_class(size_t bytes) {
  constexpr size_t kMin = 512;
  if (bytes <= kMin) return kMin;
  // Four classes per power of two: [p, 1.25p, 1.5p, 1.75p] for p = 2^k.
  const size_t p = std::bit_floor(bytes);
  const size_t quarter = p / 4;
  const size_t steps = (bytes - p + quarter - 1) / quarter;  // 0..4
  return p + steps * quarter;
}

size_t CachingDeviceAllocator::PoolKeyHash::operator()(const PoolKey& k) const {
  size_t h = std::hash<size_t>()(k.block);
  h ^= std::hash<uintptr_t>()(k.stream) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= std::hash<int>()(k.device) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

CachingDeviceAllocator::~CachingDeviceAllocator() {
  // No synchronisation here: at exit the runtime may already be gone, and
  // the process's device memory goes with the process.
  for (auto& [key, blocks] : pools_)
    for (void* p : blocks) raw_.raw_free(p, key.device);
  for (Pending& w : pending_) {
    for (void* e : w.events) raw_.destroy_event(e);
    raw_.raw_free(w.p, w.device);
  }
}

DeviceMemoryStats& CachingDeviceAllocator::stats_of(int device) {
  QK_CHECK_DEVICE(device >= 0, "device index ", device, " is negative");
  if (static_cast<size_t>(device) >= stats_.size()) stats_.resize(device + 1);
  return stats_[device];
}

void* CachingDeviceAllocator::allocate(size_t bytes, int device, Stream stream) {
  const size_t block = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  DeviceMemoryStats& st = stats_of(device);
  ++st.num_allocs;
  void* p = nullptr;
  // Not during a capture: querying events is not allowed then (PyTorch defers it too).
  if (!pending_.empty() && capturing_.empty()) settle_pending_locked();
  auto pool = pools_.find(PoolKey{device, stream, block});
  if (pool != pools_.end() && !pool->second.empty()) {
    p = pool->second.back();
    pool->second.pop_back();
    st.cached -= block;
    ++st.pool_hits;
  } else {
    p = raw_.raw_alloc(block, device);
    if (p == nullptr && st.cached > 0) {
      const uint64_t cached = st.cached;
      release_cached_locked(device);
      ++st.oom_retries;
      p = raw_.raw_alloc(block, device);
      QK_CHECK_AS(OutOfMemoryError, p != nullptr, raw_.label(device), " is out of memory: tried to allocate ",
                  format_bytes(bytes), " (a ", format_bytes(block), " block); tensors hold ",
                  format_bytes(st.allocated), ", ", format_bytes(cached),
                  " of cached blocks were released and the allocation retried, the device has ",
                  format_bytes(raw_.total_bytes(device)),
                  " in all. Free tensors you no longer need, or lower the batch size.");
    }
    QK_CHECK_AS(OutOfMemoryError, p != nullptr, raw_.label(device), " is out of memory: tried to allocate ",
                format_bytes(bytes), " (a ", format_bytes(block), " block); tensors hold ",
                format_bytes(st.allocated), ", nothing is cached, the device has ",
                format_bytes(raw_.total_bytes(device)),
                " in all (other processes may hold the rest). Free tensors you no longer need, or lower "
                "the batch size.");
    ++st.device_allocs;
    st.reserved += block;
  }
  live_.emplace(p, Live{bytes, block, device, stream, {}});
  st.allocated += bytes;
  st.peak_allocated = std::max(st.peak_allocated, st.allocated);
  return p;
}

void CachingDeviceAllocator::free(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  QK_CHECK_AS(InternalError, it != live_.end(), "freeing device memory at ", p,
              " that this allocator did not hand out (or freed twice)");
  Live l = std::move(it->second);
  live_.erase(it);
  DeviceMemoryStats& st = stats_of(l.device);
  st.allocated -= l.asked;
  st.cached += l.block;
  if (!capturing_.empty()) {
    auto cap = capturing_.find(l.device);
    if (cap != capturing_.end() && l.stream != cap->second) {
      // Made before the capture: the recorded work may use it at every replay.
      kept_now_[l.device].push_back(p);
      kept_.emplace(p, std::move(l));
      return;
    }
  }
  if (l.used_on.empty()) return pool_locked(p, l.device, l.stream, l.block);
  // Other streams used it: wait for what they queued so far (torch's record_stream).
  Pending w{p, l.device, l.stream, l.block, {}};
  for (const auto& [id, handle] : l.used_on)
    if (!retired_.count(id)) w.events.push_back(raw_.record_event(handle));  // a retired stream's work is done
  pending_.push_back(std::move(w));
}

void CachingDeviceAllocator::pool_locked(void* p, int device, Stream stream, size_t block) {
  const Stream s = retired_.count(stream) ? 0 : stream;
  pools_[PoolKey{device, s, block}].push_back(p);
}

void CachingDeviceAllocator::settle_pending_locked() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto& ev = it->events;
    ev.erase(std::remove_if(ev.begin(), ev.end(),
                            [&](void* e) {
                              if (!raw_.event_done(e)) return false;
                              raw_.destroy_event(e);
                              return true;
                            }),
             ev.end());
    if (!ev.empty()) {
      ++it;
      continue;
    }
    pool_locked(it->p, it->device, it->stream, it->block);
    it = pending_.erase(it);
  }
}

void CachingDeviceAllocator::record_stream(void* p, Stream s, void* handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  QK_CHECK_AS(InternalError, it != live_.end(), "record_stream: device memory at ", p,
              " is not a live block of this allocator (pass the start of a tensor's storage)");
  Live& l = it->second;
  if (s == l.stream) return;  // its own stream orders it already
  for (const auto& [id, h] : l.used_on)
    if (id == s) return;
  l.used_on.emplace_back(s, handle);
}

void CachingDeviceAllocator::retire_stream(Stream s) {
  if (s == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  retired_.insert(s);
  std::vector<std::pair<PoolKey, std::vector<void*>>> moved;
  for (auto it = pools_.begin(); it != pools_.end();) {
    if (it->first.stream != s) {
      ++it;
      continue;
    }
    moved.emplace_back(it->first, std::move(it->second));
    it = pools_.erase(it);
  }
  for (auto& [key, blocks] : moved) {
    auto& to = pools_[PoolKey{key.device, 0, key.block}];
    to.insert(to.end(), blocks.begin(), blocks.end());
  }
}

void CachingDeviceAllocator::begin_capture(int device, Stream g) {
  std::lock_guard<std::mutex> lock(mu_);
  QK_CHECK_AS(InternalError, !capturing_.count(device), "device ", device, " is already capturing a graph");
  capturing_[device] = g;
  private_.insert(g);
}

std::vector<void*> CachingDeviceAllocator::end_capture(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  capturing_.erase(device);
  std::vector<void*> kept;
  kept.swap(kept_now_[device]);
  return kept;
}

void CachingDeviceAllocator::release_graph(Stream g, const std::vector<void*>& kept) {
  std::lock_guard<std::mutex> lock(mu_);
  for (void* p : kept) {
    auto it = kept_.find(p);
    if (it == kept_.end()) continue;
    const Live l = std::move(it->second);
    kept_.erase(it);
    if (l.used_on.empty()) {
      pool_locked(p, l.device, l.stream, l.block);
      continue;
    }
    Pending w{p, l.device, l.stream, l.block, {}};
    for (const auto& [id, handle] : l.used_on)
      if (!retired_.count(id)) w.events.push_back(raw_.record_event(handle));
    pending_.push_back(std::move(w));
  }
  private_.erase(g);
}

void CachingDeviceAllocator::empty_cache(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked(device);
}

void CachingDeviceAllocator::release_cached_locked(int device) {
  DeviceMemoryStats& st = stats_of(device);
  if (st.cached == 0) return;
  // Work queued before a block's free may still read it; after the wait the
  // device's pending blocks are done too.
  raw_.synchronize(device);
  settle_pending_locked();
  for (auto it = pools_.begin(); it != pools_.end();) {
    if (it->first.device != device || private_.count(it->first.stream)) {  // a live graph's pool stays
      ++it;
      continue;
    }
    for (void* p : it->second) raw_.raw_free(p, device);
    st.reserved -= it->first.block * it->second.size();
    st.cached -= it->first.block * it->second.size();
    it = pools_.erase(it);
  }
}

DeviceMemoryStats CachingDeviceAllocator::stats(int device) const {
  std::lock_guard<std::mutex> lock(mu_);
  return device >= 0 && static_cast<size_t>(device) < stats_.size() ? stats_[device] : DeviceMemoryStats{};
}

void CachingDeviceAllocator::reset_peak(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  DeviceMemoryStats& st = stats_of(device);
  st.peak_allocated = st.allocated;
}

}  // namespace qk
