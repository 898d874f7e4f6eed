// The AVX512-BF16 kernels of CPU flash attention: the tile products on bf16
// pairs with vdpbf16ps (each f32 lane accumulates a[2i] b[2i] + a[2i+1] b[2i+1],
// twice the multiply-adds of an f32 FMA), and the f32 -> bf16 tile
// conversions feeding them. Used for bf16 inputs where the CPU has
// AVX512-BF16 (checked at run time); elsewhere bf16 runs through the f32
// kernels (flash_attention_simd.cc) with the same results up to rounding.
#include "cpu/flash_attention_simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace qk::cpu::flash {

#if defined(__x86_64__) && defined(__GNUC__)
namespace {

#define QK_FA_BF16 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512bf16")))
#define QK_FA_BF16_INLINE [[gnu::always_inline]] inline QK_FA_BF16

// GCC 12 warns inside its AVX-512 headers about the intrinsics' undefined
// pass-through operands (a known false positive; see pool.cc).
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

QK_FA_BF16_INLINE __m512i pair_at(const uint16_t* p) {
  uint32_t w;
  __builtin_memcpy(&w, p, 4);
  return _mm512_set1_epi32(static_cast<int>(w));
}

// RI rows x CV vectors of C; B is [kp][ldb][2] bf16, A's pair p of row r
// starts at a + r * a_rs + p * a_cs.
template <int RI, int CV>
QK_FA_BF16_INLINE void tile(const GemmBf16Args& g, int64_t m0, int64_t n0) {
  __m512 acc[RI][CV];
  float* c = g.c + m0 * g.ldc + n0;
#pragma GCC unroll 8
  for (int r = 0; r < RI; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < CV; ++v)
      acc[r][v] = g.accumulate ? _mm512_loadu_ps(c + r * g.ldc + 16 * v) : _mm512_setzero_ps();
  const uint16_t* a = g.a + m0 * g.a_rs;
  const uint16_t* b = g.b + 2 * n0;
  for (int64_t p = 0; p < g.kp; ++p) {
    __m512i bv[CV];
#pragma GCC unroll 8
    for (int v = 0; v < CV; ++v) bv[v] = _mm512_loadu_si512(b + 2 * (p * g.ldb + 16 * v));
#pragma GCC unroll 8
    for (int r = 0; r < RI; ++r) {
      const __m512i av = pair_at(a + r * g.a_rs + p * g.a_cs);
#pragma GCC unroll 8
      for (int v = 0; v < CV; ++v)
        acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)av, (__m512bh)bv[v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < RI; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < CV; ++v) _mm512_storeu_ps(c + r * g.ldc + 16 * v, acc[r][v]);
}

template <int CV>
QK_FA_BF16_INLINE void rows(const GemmBf16Args& g, int64_t n0) {
  int64_t m0 = 0;
  for (; m0 + 6 <= g.m; m0 += 6) tile<6, CV>(g, m0, n0);
  switch (g.m - m0) {
    case 5: tile<5, CV>(g, m0, n0); break;
    case 4: tile<4, CV>(g, m0, n0); break;
    case 3: tile<3, CV>(g, m0, n0); break;
    case 2: tile<2, CV>(g, m0, n0); break;
    case 1: tile<1, CV>(g, m0, n0); break;
    default: break;
  }
}

QK_FA_BF16 void gemm_bf16(const GemmBf16Args& g) {
  int64_t n0 = 0;
  for (; n0 + 64 <= g.n; n0 += 64) rows<4>(g, n0);
  switch ((g.n - n0) / 16) {
    case 3: rows<3>(g, n0); break;
    case 2: rows<2>(g, n0); break;
    case 1: rows<1>(g, n0); break;
    default: break;
  }
}

QK_FA_BF16 void to_bf16(const float* src, int64_t rows_n, int64_t ncols, uint16_t* dst) {
  for (int64_t j = 0; j < rows_n; ++j)
    for (int64_t c = 0; c < ncols; c += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j * ncols + c),
                          (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + j * ncols + c)));
}

QK_FA_BF16 void to_bf16_row_pairs(const float* src, int64_t rows_n, int64_t ncols,
                                   uint16_t* dst) {
  // Word 2i of the result is row j's column i, word 2i + 1 row j + 1's.
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25,
                                              9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2,
                                              17, 1, 16, 0);
  for (int64_t j = 0; j < rows_n; j += 2)
    for (int64_t c = 0; c < ncols; c += 16) {
      const __m512 lo = _mm512_loadu_ps(src + j * ncols + c);
      const __m512 hi = j + 1 < rows_n ? _mm512_loadu_ps(src + (j + 1) * ncols + c)
                                       : _mm512_setzero_ps();
      const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);  // lo's 16, then hi's 16
      _mm512_storeu_si512(dst + j * ncols + 2 * c, _mm512_permutexvar_epi16(interleave, both));
    }
}

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

constexpr Bf16Leaves kBf16 = {gemm_bf16, to_bf16, to_bf16_row_pairs};

}  // namespace

const Bf16Leaves* bf16_leaves() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bf16");
  return has ? &kBf16 : nullptr;
}

#else

const Bf16Leaves* bf16_leaves() { return nullptr; }

#endif

}  // namespace qk::cpu::flash
