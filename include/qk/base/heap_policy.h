// glibc's heap kept for a process that allocates and frees the same buffers
// every step (a training loop, an MD run).
//
// glibc maps each block above its mmap threshold afresh and gives freed
// memory at the top of the heap back to the system past its trim threshold;
// both start low (128 KiB) and adapt only slowly, so a step's mid-size
// temporaries (tensors under the CPU block cache's 1 MiB, qccl's and the
// layers' scratch) were mapped and faulted in page by page every step:
// tensor-parallel training of a small GPT on 2 ranks spent ~20% of its
// samples in the kernel's page-fault path. keep_freed_heap_memory() raises
// the mmap threshold to 32 MiB (glibc's own ceiling for it) and the trim
// threshold to 1 GiB, so freed memory is reused: peak memory is unchanged,
// memory freed after a peak stays with the process. `qk` calls it at start;
// programs using the library call it themselves. QK_KEEP_FREED_HEAP=0 leaves
// glibc's defaults.
#pragma once

namespace qk {

// Returns whether the policy was applied (false: disabled, or not glibc).
bool keep_freed_heap_memory();

}  // namespace qk
