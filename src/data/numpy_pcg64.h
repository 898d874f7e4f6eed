// numpy.random.default_rng(seed).integers(low, high, size, dtype=numpy.int32),
// bit for bit, so --mock-data draws the sequence lengths Megatron-Core's
// MockGPTLowLevelDataset draws.
//
// default_rng(seed) is PCG64 (XSL-RR 128/64) seeded from SeedSequence(seed):
// the seed's 32-bit words are hashed into a 4-word pool (mix_entropy), four
// 64-bit words are drawn from the pool (generate_state), and the first two
// are the 128-bit state seed, the last two the stream (pcg64_set_seed).
// integers() for int32 draws 32-bit halves of 64-bit outputs (low half first)
// and bounds them with Lemire's multiply-and-reject method.
#pragma once

#include <array>
#include <cstdint>

namespace qk::data {

class NumpyPcg64 {
 public:
  explicit NumpyPcg64(uint64_t seed) {
    const std::array<uint64_t, 4> s = seed_sequence_state(seed);
    // pcg_setseq_128_srandom_r
    state_ = 0;
    inc_ = ((static_cast<u128>(s[2]) << 64 | s[3]) << 1) | 1u;
    step();
    state_ += static_cast<u128>(s[0]) << 64 | s[1];
    step();
  }

  uint64_t next64() {
    step();
    // XSL-RR: xor the halves, rotate right by the top 6 bits.
    const uint64_t v = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
    const unsigned rot = static_cast<unsigned>(state_ >> 122);
    return (v >> rot) | (v << ((64u - rot) & 63u));
  }

  uint32_t next32() {
    if (has_half_) {
      has_half_ = false;
      return half_;
    }
    const uint64_t n = next64();
    has_half_ = true;
    half_ = static_cast<uint32_t>(n >> 32);
    return static_cast<uint32_t>(n);
  }

  // A value in [low, high) as integers(low, high, dtype=int32) draws it
  // (buffered_bounded_lemire_uint32 over rng = high - 1 - low).
  int32_t integer(int32_t low, int32_t high) {
    const uint32_t rng = static_cast<uint32_t>(high - 1 - low);
    if (rng == 0) return low;
    const uint32_t excl = rng + 1;
    uint64_t m = static_cast<uint64_t>(next32()) * excl;
    uint32_t leftover = static_cast<uint32_t>(m);
    if (leftover < excl) {
      const uint32_t threshold = (UINT32_MAX - rng) % excl;
      while (leftover < threshold) {
        m = static_cast<uint64_t>(next32()) * excl;
        leftover = static_cast<uint32_t>(m);
      }
    }
    return low + static_cast<int32_t>(m >> 32);
  }

 private:
  using u128 = unsigned __int128;

  void step() {
    constexpr u128 kMult = static_cast<u128>(0x2360ED051FC65DA4ull) << 64 | 0x4385DF649FCCF645ull;
    state_ = state_ * kMult + inc_;
  }

  // SeedSequence(seed).generate_state(4, numpy.uint64) for a seed below 2^64.
  static std::array<uint64_t, 4> seed_sequence_state(uint64_t seed) {
    constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded,
                       kMixL = 0xca01f9dd, kMixR = 0x4973f715;
    // _int_to_uint32_array: little-endian 32-bit words, [0] for 0.
    uint32_t entropy[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
    const int words = (seed >> 32) ? 2 : 1;
    uint32_t hash_const = kInitA;
    auto hashmix = [&](uint32_t v) {
      v ^= hash_const;
      hash_const *= kMultA;
      v *= hash_const;
      v ^= v >> 16;
      return v;
    };
    auto mix = [](uint32_t x, uint32_t y) {
      uint32_t r = kMixL * x - kMixR * y;
      r ^= r >> 16;
      return r;
    };
    std::array<uint32_t, 4> pool{};
    for (int i = 0; i < 4; ++i) pool[i] = hashmix(i < words ? entropy[i] : 0u);
    for (int src = 0; src < 4; ++src)
      for (int dst = 0; dst < 4; ++dst)
        if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src]));
    uint32_t out[8];
    uint32_t hb = kInitB;
    for (int i = 0; i < 8; ++i) {
      uint32_t v = pool[i % 4];
      v ^= hb;
      hb *= kMultB;
      v *= hb;
      v ^= v >> 16;
      out[i] = v;
    }
    std::array<uint64_t, 4> s{};
    for (int i = 0; i < 4; ++i) s[i] = static_cast<uint64_t>(out[2 * i + 1]) << 32 | out[2 * i];
    return s;
  }

  u128 state_ = 0, inc_ = 0;
  bool has_half_ = false;
  uint32_t half_ = 0;
};

}  // namespace qk::data
