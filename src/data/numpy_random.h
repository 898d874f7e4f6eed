// numpy.random.RandomState(seed).shuffle, bit for bit, so GPT sampling
// orders documents and samples exactly as Megatron-Core does.
//
// RandomState with an integer seed is MT19937 seeded by init_genrand, the
// same generator as std::mt19937(seed). Its legacy shuffle walks i from
// n-1 down to 1 and swaps x[i] with x[j], j = random_interval(i): draws of
// next_uint32() (next_uint64() when i >= 2^32) masked to the smallest
// all-ones mask >= i, rejected while > i.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>

namespace qk::data {

class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : mt_(seed) {}

  uint64_t random_interval(uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    uint64_t v;
    if (max <= 0xffffffffull) {
      do v = static_cast<uint32_t>(mt_()) & mask; while (v > max);
    } else {
      do {
        const uint64_t hi = static_cast<uint32_t>(mt_());
        v = ((hi << 32) | static_cast<uint32_t>(mt_())) & mask;
      } while (v > max);
    }
    return v;
  }

  template <typename T>
  void shuffle(std::span<T> x) {
    for (size_t i = x.size() > 0 ? x.size() - 1 : 0; i >= 1; --i)
      std::swap(x[i], x[static_cast<size_t>(random_interval(i))]);
  }

 private:
  std::mt19937 mt_;
};

}  // namespace qk::data
