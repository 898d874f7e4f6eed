// The GPU backends' caching allocator (src/tensor/device_allocator.h) on a
// fake device with a fixed capacity: size classes, reuse per device and
// stream, statistics, empty_cache, and the out-of-memory path (release the
// cache, retry once, then an error that says what was asked and held).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>

#include "device_allocator.h"
#include "qk/base/error.h"

namespace qk {
namespace {

class FakeDevice final : public RawDeviceMemory {
 public:
  explicit FakeDevice(size_t capacity) : capacity_(capacity) {}
  ~FakeDevice() override {
    EXPECT_EQ(in_use_, 0u) << "blocks never given back";
    EXPECT_TRUE(events_.empty()) << events_.size() << " events never destroyed";
  }
  void* raw_alloc(size_t bytes, int) override {
    ++allocs_;
    if (in_use_ + bytes > capacity_) return nullptr;
    in_use_ += bytes;
    void* p = std::malloc(bytes);
    sizes_[p] = bytes;
    return p;
  }
  void raw_free(void* p, int) override {
    ++frees_;
    in_use_ -= sizes_.at(p);
    sizes_.erase(p);
    std::free(p);
  }
  void synchronize(int) override {
    ++syncs_;
    for (auto& [e, done] : events_) done = true;  // the device's work, every stream's, is done
  }
  // Events finish when the test says (finish) or at a synchronisation.
  void* record_event(void* stream) override {
    auto* e = new int(static_cast<int>(events_.size()));
    events_[e] = false;
    last_stream_ = stream;
    return e;
  }
  bool event_done(void* e) override { return events_.at(e); }
  void destroy_event(void* e) override {
    events_.erase(e);
    delete static_cast<int*>(e);
  }
  void finish_all() {
    for (auto& [e, done] : events_) done = true;
  }
  uint64_t total_bytes(int) override { return capacity_; }
  std::string label(int device) override { return "fake:" + std::to_string(device); }

  size_t capacity_, in_use_ = 0;
  int allocs_ = 0, frees_ = 0, syncs_ = 0;
  std::map<void*, size_t> sizes_;
  std::map<void*, bool> events_;  // live events: done?
  void* last_stream_ = nullptr;
};

using Alloc = CachingDeviceAllocator;

TEST(DeviceAllocator, SizeClassesWasteAtMostAQuarterOfTheRequest) {
  EXPECT_EQ(Alloc::size_class(0), 512u);
  EXPECT_EQ(Alloc::size_class(512), 512u);
  EXPECT_EQ(Alloc::size_class(513), 640u);
  EXPECT_EQ(Alloc::size_class(1024), 1024u);
  EXPECT_EQ(Alloc::size_class(1025), 1280u);
  EXPECT_EQ(Alloc::size_class((3u << 20) + 1), 3584u << 10);  // 3 MiB + 1 -> 3.5 MiB
  std::set<size_t> classes;
  for (size_t b = 1; b < (1u << 22); b = b * 9 / 8 + 1) {
    size_t c = Alloc::size_class(b);
    EXPECT_GE(c, b);
    if (b > 512) {
      EXPECT_LE(c, b + b / 4) << b;
    }
    classes.insert(c);
  }
  EXPECT_LT(classes.size(), 4u * 22) << "four classes per power of two";
}

TEST(DeviceAllocator, FreedBlocksAreReusedOnTheSameDeviceAndStreamOnly) {
  FakeDevice dev(64 << 20);
  {
    Alloc a(dev);
    void* p = a.allocate(1000, 0, 7);
    a.free(p);
    EXPECT_EQ(a.allocate(900, 0, 7), p) << "same class, same stream: the cached block";
    void* q = a.allocate(900, 0, 8);  // another stream: a new block
    EXPECT_NE(q, p);
    void* r = a.allocate(900, 1, 7);  // another device: a new block
    EXPECT_NE(r, p);
    EXPECT_EQ(dev.allocs_, 3);
    DeviceMemoryStats s = a.stats(0);
    EXPECT_EQ(s.allocated, 1800u);
    EXPECT_EQ(s.reserved, 2048u);
    EXPECT_EQ(s.cached, 0u);
    EXPECT_EQ(s.num_allocs, 3u);
    EXPECT_EQ(s.pool_hits, 1u);
    EXPECT_EQ(s.device_allocs, 2u);
    a.free(p);
    a.free(q);
    a.free(r);
    s = a.stats(0);
    EXPECT_EQ(s.allocated, 0u);
    EXPECT_EQ(s.cached, 2048u);
    EXPECT_EQ(s.peak_allocated, 1800u);  // two of 900 (the 1000 was freed first)
    a.reset_peak(0);
    EXPECT_EQ(a.stats(0).peak_allocated, 0u);
    a.empty_cache(0);
    EXPECT_EQ(a.stats(0).reserved, 0u);
    EXPECT_EQ(a.stats(1).cached, 1024u) << "device 1's cache is its own";
    EXPECT_EQ(dev.syncs_, 1) << "the device is synchronised before its blocks go back";
  }
  EXPECT_EQ(dev.frees_, 3) << "the destructor released device 1's cached block";
}

TEST(DeviceAllocator, OutOfMemoryReleasesTheCacheAndRetriesOnce) {
  FakeDevice dev(10 << 20);
  Alloc a(dev);
  void* big = a.allocate(6 << 20, 0, 0);
  a.free(big);  // cached: 6 MiB of the device's 10
  void* other = a.allocate(8 << 20, 0, 0);  // another class: only fits once the cache is released
  EXPECT_NE(other, nullptr);
  DeviceMemoryStats s = a.stats(0);
  EXPECT_EQ(s.oom_retries, 1u);
  EXPECT_EQ(s.cached, 0u);
  EXPECT_EQ(s.reserved, 8u << 20);
  EXPECT_EQ(dev.syncs_, 1);
  try {
    a.allocate(3 << 20, 0, 0);
    ADD_FAILURE() << "8 + 3 MiB fit a 10 MiB device";
  } catch (const OutOfMemoryError& e) {
    std::string m = e.message();
    EXPECT_NE(m.find("fake:0 is out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("tried to allocate 3.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("tensors hold 8.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("10.0 MiB in all"), std::string::npos) << m;
  }
  EXPECT_EQ(a.stats(0).allocated, 8u << 20) << "a failed allocation changes nothing";
  a.free(other);
  a.empty_cache(0);
}

TEST(DeviceAllocator, ARetiredStreamsBlocksServeTheDefaultStream) {
  FakeDevice dev(64 << 20);
  Alloc a(dev);
  void* cached = a.allocate(4096, 0, 5);
  void* live = a.allocate(8192, 0, 5);
  a.free(cached);
  a.retire_stream(5);  // its work done: its pool moves to the default stream
  EXPECT_EQ(a.allocate(4096, 0, 0), cached);
  a.free(live);  // allocated on the retired stream, freed after it went
  EXPECT_EQ(a.allocate(8192, 0, 0), live);
  EXPECT_EQ(dev.allocs_, 2) << "no new device blocks";
  a.free(cached);
  a.free(live);
  a.empty_cache(0);
}

// Graph capture on stream 7: a block made before the capture and freed
// during it is kept for the graph (its recorded work reads it at every
// replay), not handed to the next allocation; blocks made and freed within
// the capture are reused in its order; the graph's pool survives
// empty_cache while the graph lives; releasing the graph gives both back.
TEST(DeviceAllocator, AGraphKeepsWhatItsCaptureFreedAndItsOwnPool) {
  FakeDevice dev(64 << 20);
  Alloc a(dev);
  void* before = a.allocate(4096, 0, 0);
  a.begin_capture(0, 7);
  a.free(before);
  void* eager = a.allocate(4096, 0, 0);
  EXPECT_NE(eager, before) << "a block the graph may read was handed out during its capture";
  void* in_graph = a.allocate(8192, 0, 7);
  a.free(in_graph);
  EXPECT_EQ(a.allocate(8192, 0, 7), in_graph) << "the capture's own blocks are reused in its order";
  a.free(in_graph);
  const std::vector<void*> kept = a.end_capture(0);
  EXPECT_EQ(kept, std::vector<void*>{before});
  void* after = a.allocate(4096, 0, 0);
  EXPECT_NE(after, before) << "a kept block was handed out after the capture";
  a.free(eager);
  a.free(after);
  const int frees = dev.frees_;
  a.empty_cache(0);
  EXPECT_EQ(dev.sizes_.count(in_graph), 1u) << "empty_cache gave a live graph's pool back to the device";
  EXPECT_GT(dev.frees_, frees);  // the default stream's cached blocks went
  a.release_graph(7, kept);
  EXPECT_EQ(a.allocate(4096, 0, 0), before) << "the graph's kept block back in its stream's pool";
  a.free(before);
  a.retire_stream(7);  // the graph's stream goes with the graph
  a.empty_cache(0);
  EXPECT_EQ(dev.in_use_, 0u);
}

// torch's record_stream: a block another stream used is not handed out
// again (not even on its own stream) before that stream's work is done.
TEST(DeviceAllocator, ABlockAnotherStreamUsedWaitsForThatStream) {
  FakeDevice dev(1 << 20);
  {
    Alloc a(dev);
    int side = 0;
    void* p = a.allocate(1000, 0, /*stream=*/0);
    a.record_stream(p, /*stream=*/7, &side);
    a.record_stream(p, 0, nullptr);  // its own stream: nothing to wait for
    a.free(p);
    EXPECT_EQ(dev.events_.size(), 1u) << "one event, on the other stream";
    EXPECT_EQ(dev.last_stream_, &side);
    void* q = a.allocate(1000, 0, 0);
    EXPECT_NE(q, p) << "reused while stream 7 may still read it";
    a.free(q);
    dev.finish_all();
    void* r = a.allocate(1000, 0, 0);
    void* s = a.allocate(1000, 0, 0);
    EXPECT_TRUE((r == p && s == q) || (r == q && s == p)) << "both back in the pool once stream 7 is done";
    EXPECT_TRUE(dev.events_.empty());
    EXPECT_EQ(a.stats(0).cached, 0u);
    a.free(r);
    a.free(s);
    // A pending block at empty_cache: the device's wait makes it done.
    void* t = a.allocate(5000, 0, 0);
    a.record_stream(t, 7, &side);
    a.free(t);
    a.empty_cache(0);
    EXPECT_EQ(a.stats(0).reserved, 0u);
    EXPECT_EQ(a.stats(0).cached, 0u);
    EXPECT_THROW(a.record_stream(t, 7, &side), InternalError) << "a freed block";
  }
}

TEST(DeviceAllocator, ForeignPointersAreRefused) {
  FakeDevice dev(1 << 20);
  Alloc a(dev);
  int x = 0;
  EXPECT_THROW(a.free(&x), InternalError);
  void* p = a.allocate(10, 0, 0);
  a.free(p);
  EXPECT_THROW(a.free(p), InternalError) << "freed twice";
  a.free(nullptr);  // like free(3)
  a.empty_cache(0);
}

}  // namespace
}  // namespace qk
