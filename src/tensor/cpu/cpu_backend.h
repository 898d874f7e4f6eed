#pragma once

#include <cstddef>

#include "qk/tensor/backend.h"

namespace qk::cpu {
Backend& cpu_backend();
// The allocator's cache of freed large blocks (block_cache.h): bytes held,
// allocations it served, and giving everything back to the system.
size_t cached_bytes();
size_t cache_hits();
void empty_cache();
}  // namespace qk::cpu
