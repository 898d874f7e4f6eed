// keep_freed_heap_memory() (heap_policy.h): a step that allocates, touches
// and frees 8 MiB of 512 KiB blocks again and again faults its pages in once,
// not every step (glibc's defaults give the freed top of the heap back and
// map it again: ~2000 faults a step).
#include "qk/base/heap_policy.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

TEST(HeapPolicy, RepeatedStepsReuseTheirMemory) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "glibc's malloc only";
#endif
  ASSERT_TRUE(qk::keep_freed_heap_memory()) << "QK_KEEP_FREED_HEAP=0 in the environment?";
  constexpr size_t kBlock = 512 << 10;
  auto step = [] {
    std::vector<char*> blocks;
    for (int i = 0; i < 16; ++i) {
      blocks.push_back(static_cast<char*>(std::malloc(kBlock)));
      std::memset(blocks.back(), i, kBlock);
    }
    for (char* b : blocks) std::free(b);
  };
  step();
  step();  // the heap has grown to the step's size
  const long before = minor_faults();
  for (int i = 0; i < 10; ++i) step();
  EXPECT_LT(minor_faults() - before, 200) << "10 steps of 8 MiB each faulted as if mapped anew";
}

}  // namespace
