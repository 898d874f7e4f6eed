// The GPU backends' pinned-memory cache (src/tensor/pinned_allocator.h) on
// a fake runtime whose events finish when the test says: blocks are reused
// by size class, never while a copy recorded on them is pending, foreign
// pointers are refused, empty_cache gives back only what is done, and
// every event is destroyed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>

#include "pinned_allocator.h"
#include "qk/base/error.h"

namespace qk {
namespace {

class FakeHost final : public RawPinnedMemory {
 public:
  ~FakeHost() override {
    EXPECT_TRUE(live_.empty()) << live_.size() << " pinned blocks never given back";
    EXPECT_TRUE(events_.empty()) << events_.size() << " events never destroyed";
  }
  void* raw_alloc_pinned(size_t bytes) override {
    ++allocs_;
    if (fail_next_ > 0) {
      --fail_next_;
      return nullptr;
    }
    void* p = std::malloc(bytes);
    live_.insert(p);
    return p;
  }
  void raw_free_pinned(void* p) override {
    ++frees_;
    ASSERT_EQ(live_.erase(p), 1u) << "freed a block twice or one it never gave";
    std::free(p);
  }
  void* record_event(void* stream) override {
    auto* e = new int(++next_event_);
    events_[e] = stream;
    return e;
  }
  bool event_done(void* e) override { return done_.count(*static_cast<int*>(e)) > 0; }
  void destroy_event(void* e) override {
    ASSERT_EQ(events_.erase(e), 1u);
    delete static_cast<int*>(e);
  }
  void finish(int event) { done_.insert(event); }
  void finish_all() {
    for (auto& [e, s] : events_) done_.insert(*static_cast<int*>(e));
  }

  std::set<void*> live_;
  std::map<void*, void*> events_;
  std::set<int> done_;
  int next_event_ = 0, allocs_ = 0, frees_ = 0, fail_next_ = 0;
};

TEST(PinnedAllocator, SizeClassesArePowersOfTwoFromFourKiB) {
  EXPECT_EQ(CachingPinnedAllocator::size_class(0), 4096u);
  EXPECT_EQ(CachingPinnedAllocator::size_class(4096), 4096u);
  EXPECT_EQ(CachingPinnedAllocator::size_class(4097), 8192u);
  EXPECT_EQ(CachingPinnedAllocator::size_class(3u << 20), 4u << 20);
}

TEST(PinnedAllocator, AFreedBlockIsReusedForItsSizeClass) {
  FakeHost host;
  CachingPinnedAllocator a(host);
  void* p = a.allocate(5000);
  a.free(p);
  EXPECT_EQ(a.allocate(6000), p) << "same class (8 KiB): the cached block";
  void* q = a.allocate(5000);
  EXPECT_NE(q, p) << "the first is in use";
  void* r = a.allocate(20000);
  EXPECT_EQ(host.allocs_, 3);
  EXPECT_EQ(a.stats().pool_hits, 1u);
  EXPECT_EQ(a.stats().reserved, 8192u + 8192u + 32768u);
  EXPECT_EQ(a.stats().in_use, 3u);
  for (void* b : {p, q, r}) a.free(b);
  EXPECT_EQ(a.stats().cached, a.stats().reserved);
}

TEST(PinnedAllocator, ABlockACopyStillUsesIsNotHandedOut) {
  FakeHost host;
  CachingPinnedAllocator a(host);
  int stream = 0;
  char* p = static_cast<char*>(a.allocate(10000));
  EXPECT_TRUE(a.record_use(p + 100, &stream));  // a copy from inside the block, event 1
  a.free(p);
  void* q = a.allocate(10000);
  EXPECT_NE(q, p) << "handed out while the copy (event 1) was pending";
  EXPECT_EQ(a.stats().waited_for, 1u);
  a.free(q);
  host.finish(1);
  void* again = a.allocate(10000);
  EXPECT_TRUE(again == p || again == q);
  void* other = a.allocate(10000);
  EXPECT_TRUE((again == p && other == q) || (again == q && other == p)) << "both blocks free and done: both reused";
  EXPECT_EQ(host.allocs_, 2);
  a.free(again);
  a.free(other);
}

TEST(PinnedAllocator, ForeignPointersAreNotRecordedOrFreed) {
  FakeHost host;
  CachingPinnedAllocator a(host);
  int stream = 0;
  char* p = static_cast<char*>(a.allocate(100));
  char outside[16];
  EXPECT_FALSE(a.record_use(outside, &stream));
  EXPECT_FALSE(a.owns(outside));
  EXPECT_TRUE(a.owns(p + 4095));
  EXPECT_FALSE(a.owns(p + 4096)) << "one past the 4 KiB block";
  EXPECT_THROW(a.free(outside), InternalError);
  a.free(p);
  EXPECT_THROW(a.free(p), InternalError) << "a double free";
}

TEST(PinnedAllocator, EmptyCacheGivesBackOnlyFreeBlocksWhoseCopiesAreDone) {
  FakeHost host;
  CachingPinnedAllocator a(host);
  int stream = 0;
  void* busy = a.allocate(100);
  void* pending = a.allocate(100);
  void* idle = a.allocate(100);
  a.record_use(pending, &stream);
  a.free(pending);
  a.free(idle);
  a.empty_cache();
  EXPECT_EQ(host.frees_, 1) << "only the idle block: one is in use, one awaits its copy";
  EXPECT_EQ(a.stats().reserved, 2u * 4096u);
  host.finish_all();
  a.empty_cache();
  EXPECT_EQ(host.frees_, 2);
  a.free(busy);
}

TEST(PinnedAllocator, WhenPinningFailsTheCacheIsGivenBackAndItTriesOnceMore) {
  FakeHost host;
  CachingPinnedAllocator a(host);
  a.free(a.allocate(100));  // a cached 4 KiB block
  host.fail_next_ = 1;
  void* big = a.allocate(1 << 20);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(host.frees_, 1) << "the cached block went back before the retry";
  host.fail_next_ = 2;
  EXPECT_EQ(a.allocate(1 << 20), nullptr) << "no memory even after the retry: nullptr, not a throw";
  a.free(big);
}

}  // namespace
}  // namespace qk
