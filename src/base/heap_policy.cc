#include "qk/base/heap_policy.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "qk/base/env.h"

namespace qk {

bool keep_freed_heap_memory() {
  QK_ENV_BOOL(env_keep, "QK_KEEP_FREED_HEAP", true,
              "qk keeps freed heap memory for reuse (glibc's mmap threshold 32 MiB, trim threshold 1 GiB: "
              "no page faults for a step's repeated mid-size buffers); 0: glibc's defaults");
  if (!env_keep.get()) return false;
#if defined(__GLIBC__)
  return mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
#else
  return false;
#endif
}

}  // namespace qk
