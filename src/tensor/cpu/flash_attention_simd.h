// The SIMD tile kernels of CPU flash attention, one set per instruction set
// (AVX-512 where the CPU has it, else the build's baseline: AVX2 under the
// default -march=x86-64-v3, plain vectors elsewhere), chosen once at run time.
// The drivers (flash_attention_fwd.cc / _bwd.cc) block, pack and thread; these
// do the arithmetic on f32 tiles.
//
// Score tiles are transposed: element (j, i) of a [nk][ncols] tile is key j
// against query row i, so the softmax statistics of a query row run along
// vector lanes and every step is a whole-vector operation. ncols is a multiple
// of kColPad (every variant's vector width divides it); scores are in the
// log2 domain (q was scaled by scale * log2(e)), so the kernels use exp2.
#pragma once

#include <cstdint>
#include <vector>

namespace qk::cpu::flash {

inline constexpr int64_t kColPad = 16;

// C[m, n] (+)= A[m, k] B[k, n]. A is read one element at a time through the
// strides (a_rs, a_cs), so it may be a transposed or strided view; B rows are
// contiguous (leading dim ldb), n a multiple of kColPad.
struct GemmArgs {
  int64_t m, n, k;
  const float* a;
  int64_t a_rs, a_cs;
  const float* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  bool accumulate;  // false: C = A B
};

// What a score tile of keys k0 .. k0 + nk - 1 hides or drops.
struct TileMask {
  bool causal = false;        // hide key s from column i when s > lim[i]
  const int32_t* lim = nullptr;  // [ncols]
  int64_t k0 = 0;             // a multiple of 4 (the dropout counters take 4 keys each)
  bool dropout = false;
  uint32_t keep_below = 0;  // keep iff (philox word >> 8) < keep_below
  float keep_scale = 1;     // 1 / (1 - p)
  uint64_t seed = 0;
  const uint64_t* counter = nullptr;  // [ncols]: the Philox counter of key 0 for column i
};

// The bf16 form of GemmArgs: k counts pairs. B is [kp][ldb][2] (the two bf16
// of a pair adjacent); pair p of A's row r starts at a + r * a_rs + p * a_cs.
struct GemmBf16Args {
  int64_t m, n, kp;
  const uint16_t* a;
  int64_t a_rs, a_cs;
  const uint16_t* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  bool accumulate;
};

// AVX512-BF16 kernels (flash_attention_bf16.cc).
struct Bf16Leaves {
  void (*gemm)(const GemmBf16Args& g);
  // f32 [rows][ncols] -> bf16 [rows][ncols] (pairs along a row).
  void (*to_bf16)(const float* src, int64_t rows, int64_t ncols, uint16_t* dst);
  // f32 [rows][ncols] -> bf16 [rows / 2][ncols][2] (pairs down a column; an
  // odd last row pairs with zero).
  void (*to_bf16_row_pairs)(const float* src, int64_t rows, int64_t ncols, uint16_t* dst);
};
// nullptr where the CPU lacks AVX512-BF16.
const Bf16Leaves* bf16_leaves();

struct Leaves {
  const char* isa;  // "avx512bf16", "avx512", "avx2", "generic"
  void (*gemm)(const GemmArgs& g);
  // Forward online-softmax step on the score tile s [nk][ncols] (times
  // `scale`): updates the running max m and sum l [ncols], rescales the
  // output o [d][ncols] by exp2(m_old - m_new), and overwrites s with the
  // probabilities (times the dropout factor) ready for O += V^T P.
  void (*softmax_update)(float* s, float scale, int64_t nk, int64_t ncols, const TileMask& mk,
                         float* m, float* l, float* o, int64_t d);
  // Backward: s <- P = exp2(s * scale - lse2) (hidden keys 0); with dropout
  // also z <- the factor (0 or keep_scale) and pz <- P * z.
  void (*probs)(float* s, float scale, float* pz, float* z, int64_t nk, int64_t ncols,
                const TileMask& mk, const float* lse2);
  // Backward: dp <- p * (dp * z - delta[col]) (z == nullptr: no dropout).
  void (*dscores)(const float* p, float* dp, const float* z, int64_t nk, int64_t ncols,
                  const float* delta);
  const Bf16Leaves* bf16;  // the bf16 tile products, or nullptr
};

// The fastest set this CPU runs (or the one a test chose).
const Leaves& leaves();
// Every set this CPU can run, fastest first.
std::vector<const Leaves*> available_leaves();
// Tests: run with `l` (one of available_leaves()); nullptr restores the automatic choice.
void set_leaves_for_testing(const Leaves* l);

}  // namespace qk::cpu::flash
