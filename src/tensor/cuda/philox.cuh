// Philox-4x32-10 on the device: the CPU's qk::philox4x32 (generator.h), so
// dropout masks (dropout.cu, attention.cu) match the CPU's bit for bit.
#pragma once

#include <cstdint>

namespace qk::cuda {

__device__ __forceinline__ void philox(uint64_t seed, uint64_t counter, uint32_t out[4]) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

// Word `counter`'s lane `word` (0-3), the keep rule of ops::dropout: its top
// 24 bits, as a fraction of 2^24, below 1 - p (keep_below = (1 - p) 2^24).
__device__ __forceinline__ bool philox_keep(uint64_t seed, uint64_t counter, int word, uint32_t keep_below) {
  uint32_t w[4];
  philox(seed, counter, w);
  return (w[word] >> 8) < keep_below;
}

}  // namespace qk::cuda
