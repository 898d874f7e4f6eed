// The flash-attention tile kernels, written once over GCC/Clang vector types
// of W floats and compiled twice: W = 16 inside functions targeting AVX-512,
// W = 8 for the build's baseline ISA (AVX2 under x86-64-v3; a portable
// lowering elsewhere). Everything below the per-ISA entry points is
// always_inline, so it is compiled with the entry point's instruction set,
// and no vector crosses a function boundary by value (that would change the
// calling convention between the two sets: -Wpsabi).
#include "cpu/flash_attention_simd.h"

#include <atomic>
#include <cmath>
#include <string>

#include "qk/base/env.h"
#include "qk/base/error.h"

namespace qk::cpu::flash {
namespace {

#define QK_FA_INLINE [[gnu::always_inline]] inline

template <int W>
struct Vec {
  typedef float F __attribute__((vector_size(W * 4), aligned(4), may_alias));
  typedef int32_t I __attribute__((vector_size(W * 4), aligned(4), may_alias));
  typedef uint32_t U __attribute__((vector_size(W * 4), aligned(4), may_alias));
};

template <int W>
QK_FA_INLINE typename Vec<W>::F& vat(float* p) {
  return *reinterpret_cast<typename Vec<W>::F*>(p);
}
template <int W>
QK_FA_INLINE const typename Vec<W>::F& vat(const float* p) {
  return *reinterpret_cast<const typename Vec<W>::F*>(p);
}

// x <- 2^x: Cephes' exp2f (2^f = 1 + f P(f) on [-0.5, 0.5], max relative
// error ~1.2e-7 there) times 2^n built in the exponent bits. x <= -127 gives
// 0 (the clamp makes 2^n's exponent field 0; also for -inf); NaN stays NaN
// (it passes the clamps). Inputs here are <= ~0 (scores minus a max).
template <int W>
QK_FA_INLINE void exp2_inplace(typename Vec<W>::F& x) {
  using F = typename Vec<W>::F;
  using I = typename Vec<W>::I;
  F xc = x < -127.0f ? F{} - 127.0f : x;
  xc = xc > 127.0f ? F{} + 127.0f : xc;
  const F n = (xc + 12582912.0f) - 12582912.0f;  // round to nearest (1.5 * 2^23)
  const F f = xc - n;
  F p = F{} + 1.535336188319500e-4f;
  p = p * f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.0f;
  const I e = (__builtin_convertvector(n, I) + 127) << 23;
  x = p * reinterpret_cast<F>(e);
}

// Philox-4x32-10 (qk::philox4x32) for W counters at once, one per lane:
// out[w][l] = word w of counter ctr[l]. The 32 x 32 -> 64 products run on
// 64-bit lanes (vpmuludq / vpmullq).
template <int W>
QK_FA_INLINE void philox_lanes(uint64_t seed, const uint64_t* ctr, uint32_t out[4][W]) {
  using U = typename Vec<W>::U;
  typedef uint64_t L __attribute__((vector_size(W * 8), aligned(8), may_alias));
  const L c = *reinterpret_cast<const L*>(ctr);
  U c0 = __builtin_convertvector(c, U), c1 = __builtin_convertvector(c >> 32, U);
  U c2 = U{}, c3 = U{};
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma GCC unroll 10
  for (int r = 0; r < 10; ++r) {
    const L p0 = __builtin_convertvector(c0, L) * 0xD2511F53u;
    const L p1 = __builtin_convertvector(c2, L) * 0xCD9E8D57u;
    const U n0 = __builtin_convertvector(p1 >> 32, U) ^ c1 ^ k0;
    const U n2 = __builtin_convertvector(p0 >> 32, U) ^ c3 ^ k1;
    c1 = __builtin_convertvector(p1, U);
    c3 = __builtin_convertvector(p0, U);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  *reinterpret_cast<U*>(out[0]) = c0;
  *reinterpret_cast<U*>(out[1]) = c1;
  *reinterpret_cast<U*>(out[2]) = c2;
  *reinterpret_cast<U*>(out[3]) = c3;
}

// The dropout words of keys k0 + j .. k0 + j + 3 for columns c .. c + W - 1.
template <int W>
QK_FA_INLINE void dropout_words(const TileMask& mk, int64_t c, int64_t j, uint32_t words[4][W]) {
  uint64_t ctr[W];
  const uint64_t group = static_cast<uint64_t>((mk.k0 + j) / 4);
  for (int l = 0; l < W; ++l) ctr[l] = mk.counter[c + l] + group;
  philox_lanes<W>(mk.seed, ctr, words);
}

// One register tile of C: RI rows x CV vectors, K steps of a broadcast A
// element times a B row.
template <int W, int RI, int CV>
QK_FA_INLINE void gemm_tile(const GemmArgs& g, int64_t m0, int64_t n0) {
  using F = typename Vec<W>::F;
  F acc[RI][CV];
  float* c = g.c + m0 * g.ldc + n0;
#pragma GCC unroll 8
  for (int r = 0; r < RI; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < CV; ++v) acc[r][v] = g.accumulate ? vat<W>(c + r * g.ldc + v * W) : F{};
  const float* a = g.a + m0 * g.a_rs;
  const float* b = g.b + n0;
  for (int64_t k = 0; k < g.k; ++k) {
    F bv[CV];
#pragma GCC unroll 8
    for (int v = 0; v < CV; ++v) bv[v] = vat<W>(b + k * g.ldb + v * W);
#pragma GCC unroll 8
    for (int r = 0; r < RI; ++r) {
      const float s = a[r * g.a_rs + k * g.a_cs];
#pragma GCC unroll 8
      for (int v = 0; v < CV; ++v) acc[r][v] += s * bv[v];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < RI; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < CV; ++v) vat<W>(c + r * g.ldc + v * W) = acc[r][v];
}

template <int W, int CV>
QK_FA_INLINE void gemm_rows(const GemmArgs& g, int64_t n0) {
  constexpr int kRows = 6;
  int64_t m0 = 0;
  for (; m0 + kRows <= g.m; m0 += kRows) gemm_tile<W, kRows, CV>(g, m0, n0);
  switch (g.m - m0) {
    case 5: gemm_tile<W, 5, CV>(g, m0, n0); break;
    case 4: gemm_tile<W, 4, CV>(g, m0, n0); break;
    case 3: gemm_tile<W, 3, CV>(g, m0, n0); break;
    case 2: gemm_tile<W, 2, CV>(g, m0, n0); break;
    case 1: gemm_tile<W, 1, CV>(g, m0, n0); break;
    default: break;
  }
}

// Column panels of up to 64 floats (16 for AVX2's 16 registers), each swept
// down all rows of A so the B panel stays in L1.
template <int W>
QK_FA_INLINE void gemm_impl(const GemmArgs& g) {
  constexpr int kMaxCV = W >= 16 ? 4 : 2;
  int64_t n0 = 0;
  for (; n0 + kMaxCV * W <= g.n; n0 += kMaxCV * W) gemm_rows<W, kMaxCV>(g, n0);
  const int64_t left = (g.n - n0) / W;
  if constexpr (kMaxCV == 4) {
    if (left == 3) gemm_rows<W, 3>(g, n0);
    if (left == 2) gemm_rows<W, 2>(g, n0);
  }
  if (left == 1) gemm_rows<W, 1>(g, n0);
}

template <int W>
QK_FA_INLINE void softmax_update_impl(float* s, float scale, int64_t nk, int64_t ncols,
                                      const TileMask& mk, float* m, float* l, float* o,
                                      int64_t d) {
  using F = typename Vec<W>::F;
  using I = typename Vec<W>::I;
  using U = typename Vec<W>::U;
  const F neg_inf = F{} - INFINITY;
  // The max is taken on the raw scores and scaled after, and exp2 takes
  // s * scale - m in one FMA; a negative scale (which would turn the max into
  // a min) is applied to the tile first.
  const bool prescale = scale < 0;
  const float es = prescale ? 1.0f : scale;
  for (int64_t c = 0; c < ncols; c += W) {
    // Pass 1: hide masked keys, row max (two chains for latency).
    const I lim = mk.causal ? *reinterpret_cast<const I*>(mk.lim + c) : I{};
    F mx0 = neg_inf, mx1 = neg_inf;
    for (int64_t j = 0; j < nk; ++j) {
      F& sv = vat<W>(s + j * ncols + c);
      if (prescale) sv *= scale;
      if (mk.causal) sv = static_cast<int32_t>(mk.k0 + j) <= lim ? sv : neg_inf;
      if (j & 1)
        mx1 = sv > mx1 ? sv : mx1;
      else
        mx0 = sv > mx0 ? sv : mx0;
    }
    F mx = (mx0 > mx1 ? mx0 : mx1) * es;
    const F mold = vat<W>(m + c);
    mx = mold > mx ? mold : mx;
    const F msafe = mx == neg_inf ? F{} : mx;  // a column with no key yet: exp2(-inf - 0) = 0
    F alpha = mold - msafe;
    exp2_inplace<W>(alpha);
    // Pass 2: probabilities, their sum, the dropout factor.
    F sum0 = F{}, sum1 = F{};
    for (int64_t j = 0; j < nk; j += 4) {
      uint32_t words[4][W];
      if (mk.dropout) dropout_words<W>(mk, c, j, words);
      const int64_t rows = nk - j < 4 ? nk - j : 4;
      for (int64_t r = 0; r < rows; ++r) {
        F& sv = vat<W>(s + (j + r) * ncols + c);
        F p = sv * es - msafe;
        exp2_inplace<W>(p);
        if (r & 1)
          sum1 += p;
        else
          sum0 += p;
        if (mk.dropout) {
          const U w = *reinterpret_cast<const U*>(words[r]);
          p = (w >> 8) < mk.keep_below ? p * mk.keep_scale : F{};
        }
        sv = p;
      }
    }
    vat<W>(l + c) = vat<W>(l + c) * alpha + (sum0 + sum1);
    vat<W>(m + c) = mx;
    for (int64_t r = 0; r < d; ++r) vat<W>(o + r * ncols + c) *= alpha;
  }
}

template <int W>
QK_FA_INLINE void probs_impl(float* s, float scale, float* pz, float* z, int64_t nk,
                             int64_t ncols, const TileMask& mk, const float* lse2) {
  using F = typename Vec<W>::F;
  using I = typename Vec<W>::I;
  using U = typename Vec<W>::U;
  const F neg_inf = F{} - INFINITY;
  for (int64_t c = 0; c < ncols; c += W) {
    const I lim = mk.causal ? *reinterpret_cast<const I*>(mk.lim + c) : I{};
    const F lse = vat<W>(lse2 + c);
    for (int64_t j = 0; j < nk; j += 4) {
      uint32_t words[4][W];
      if (mk.dropout) dropout_words<W>(mk, c, j, words);
      const int64_t rows = nk - j < 4 ? nk - j : 4;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t at = (j + r) * ncols + c;
        F p = vat<W>(s + at) * scale - lse;
        if (mk.causal) p = static_cast<int32_t>(mk.k0 + j + r) <= lim ? p : neg_inf;
        exp2_inplace<W>(p);
        vat<W>(s + at) = p;
        if (mk.dropout) {
          const U w = *reinterpret_cast<const U*>(words[r]);
          const F zf = (w >> 8) < mk.keep_below ? F{} + mk.keep_scale : F{};
          vat<W>(z + at) = zf;
          vat<W>(pz + at) = p * zf;
        }
      }
    }
  }
}

template <int W>
QK_FA_INLINE void dscores_impl(const float* p, float* dp, const float* z, int64_t nk,
                               int64_t ncols, const float* delta) {
  using F = typename Vec<W>::F;
  for (int64_t c = 0; c < ncols; c += W) {
    const F dl = vat<W>(delta + c);
    for (int64_t j = 0; j < nk; ++j) {
      const int64_t at = j * ncols + c;
      F g = vat<W>(dp + at);
      if (z != nullptr) g *= vat<W>(z + at);
      vat<W>(dp + at) = vat<W>(p + at) * (g - dl);
    }
  }
}

// ---- per-ISA entry points ----

#define QK_FA_ENTRY_POINTS(SUFFIX, W, ATTR)                                                     \
  ATTR void gemm_##SUFFIX(const GemmArgs& g) { gemm_impl<W>(g); }                               \
  ATTR void softmax_update_##SUFFIX(float* s, float scale, int64_t nk, int64_t ncols,          \
                                    const TileMask& mk, float* m, float* l, float* o,          \
                                    int64_t d) {                                               \
    softmax_update_impl<W>(s, scale, nk, ncols, mk, m, l, o, d);                                \
  }                                                                                             \
  ATTR void probs_##SUFFIX(float* s, float scale, float* pz, float* z, int64_t nk,              \
                           int64_t ncols, const TileMask& mk, const float* lse2) {             \
    probs_impl<W>(s, scale, pz, z, nk, ncols, mk, lse2);                                        \
  }                                                                                             \
  ATTR void dscores_##SUFFIX(const float* p, float* dp, const float* z, int64_t nk,              \
                             int64_t ncols, const float* delta) {                               \
    dscores_impl<W>(p, dp, z, nk, ncols, delta);                                                \
  }                                                                                             \
  constexpr Leaves kLeaves_##SUFFIX = {#SUFFIX,           gemm_##SUFFIX,    softmax_update_##SUFFIX, \
                                       probs_##SUFFIX,    dscores_##SUFFIX, nullptr};

#if defined(__x86_64__) && defined(__GNUC__)
#define QK_FA_AVX512 1
QK_FA_ENTRY_POINTS(avx512, 16, __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq"))))
#if defined(__AVX2__)
QK_FA_ENTRY_POINTS(avx2, 8, )
#else
QK_FA_ENTRY_POINTS(generic, 8, )
#endif
#else
QK_FA_ENTRY_POINTS(generic, 8, )
#endif

const Leaves* baseline() {
#if defined(__AVX2__) && defined(QK_FA_AVX512)
  return &kLeaves_avx2;
#else
  return &kLeaves_generic;
#endif
}

bool cpu_has_avx512() {
#ifdef QK_FA_AVX512
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  return has;
#else
  return false;
#endif
}

std::atomic<const Leaves*> g_override{nullptr};

}  // namespace

std::vector<const Leaves*> available_leaves() {
  std::vector<const Leaves*> out;
#ifdef QK_FA_AVX512
  // The bf16 products need AVX-512, so their set extends the AVX-512 one.
  static const Leaves with_bf16 = [] {
    Leaves l = kLeaves_avx512;
    l.isa = "avx512bf16";
    l.bf16 = bf16_leaves();
    return l;
  }();
  if (with_bf16.bf16 != nullptr) out.push_back(&with_bf16);
  if (cpu_has_avx512()) out.push_back(&kLeaves_avx512);
#endif
  out.push_back(baseline());
  return out;
}

const Leaves& leaves() {
  if (const Leaves* l = g_override.load(std::memory_order_relaxed)) return *l;
  static const Leaves* chosen = [] {
    QK_ENV_STRING(env_isa, "QK_FLASH_ATTENTION_ISA", "auto",
                  "Flash attention's SIMD kernels: auto (the fastest this CPU runs), "
                  "avx512bf16, avx512, avx2 or generic (for benchmarks of the fallbacks).");
    const std::vector<const Leaves*> all = available_leaves();
    const std::string want = env_isa.get();
    if (want == "auto") return all.front();
    std::string names;
    for (const Leaves* l : all) {
      if (want == l->isa) return l;
      names += std::string(names.empty() ? "" : ", ") + l->isa;
    }
    QK_THROW(ValueError, "QK_FLASH_ATTENTION_ISA='", want,
             "' is not one this build and CPU run; choose auto or one of: ", names);
  }();
  return *chosen;
}

void set_leaves_for_testing(const Leaves* l) { g_override.store(l, std::memory_order_relaxed); }

}  // namespace qk::cpu::flash
