// One device workspace cut into pieces for the CUB sorts of index.cu and
// topk.cu: sized with a null base, then carved from the block the glue
// allocated.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qk::cuda {

// Bits needed for values 0..v (at least 1): a radix sort's end bit.
inline int bits_for(uint64_t v) {
  int b = 0;
  while (v) {
    ++b;
    v >>= 1;
  }
  return b < 1 ? 1 : b;
}

// Workspace pieces, each 256-byte aligned; with base == nullptr it only sizes them.
struct Carver {
  char* base;
  size_t used = 0;
  template <typename T>
  T* take(int64_t count) {
    used = (used + 255) / 256 * 256;
    T* p = base ? reinterpret_cast<T*>(base + used) : nullptr;
    used += static_cast<size_t>(count) * sizeof(T);
    return p;
  }
};

}  // namespace qk::cuda
