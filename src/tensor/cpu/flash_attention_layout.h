// What the flash-attention drivers share: the problem's geometry, the
// mapping of query rows to (position, head), packing of row blocks into the
// f32 tiles the SIMD kernels take, the dropout stream, per-thread scratch and
// the dynamic work loop.
//
// Query rows are grouped per kv head: row r of kv head hk is position
// t = r / G of query head hk * G + r % G (G = Hq / Hkv), so one block of rows
// holds every query head that reads the same K/V (grouped-query attention
// reads each K/V tile once for the group), and a block covers a contiguous
// range of positions (what causal block skipping needs).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include "cpu/flash_attention_simd.h"
#include "cpu/norm_lanes.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/ops/attention.h"

namespace qk::cpu::flash {

inline constexpr int64_t kBlockQ = 64;  // query rows per block (score tile columns)
inline constexpr int64_t kBlockK = 64;  // keys per block (score tile rows)
inline constexpr float kLog2e = 1.44269504088896341f;

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Element strides of a query-shaped tensor by [batch, position, kv head,
// query head within the kv head's group]: [B, T, Hq, D] and the grouped
// [B, T, Hkv, G, D] view (Megatron's fused QKV layout) alike.
struct QueryStrides {
  int64_t b = 0, t = 0, hk = 0, g = 0;
};
QueryStrides query_strides(const Tensor& x, int64_t G);

// A row width: d elements, dp = d padded to kColPad (tiles whose columns are head dims).
struct Width {
  int64_t d = 0, dp = 0;
};

struct Layout {
  int64_t B = 0, T = 0, S = 0, Hq = 0, Hkv = 0, D = 0;
  int64_t Dv = 0;  // value (and output) head dim
  int64_t G = 1;   // query heads per kv head
  int64_t R = 0;   // query rows per kv head: T * G
  int64_t Dp = 0;  // D padded to kColPad
  int64_t Dvp = 0;  // Dv padded to kColPad
  bool causal = true;
  float scale = 1;
  QueryStrides qs;
  int64_t ks[3] = {}, vs[3] = {};  // element strides of k and v by [b, s, h]

  int64_t t_of(int64_t r) const { return r / G; }
  int64_t hq_of(int64_t hk, int64_t r) const { return hk * G + r % G; }
  // The last key position t sees (S - 1 without the causal mask; < 0: none).
  int64_t last_key(int64_t t) const { return causal ? t + S - T : S - 1; }
  // Keys [0, kv_end) hold every key rows [r0, r0 + nr) see.
  int64_t kv_end(int64_t r0, int64_t nr) const {
    return std::clamp<int64_t>(last_key(t_of(r0 + nr - 1)) + 1, 0, S);
  }
  int64_t q_blocks() const { return (R + kBlockQ - 1) / kBlockQ; }
  Width qk() const { return {D, Dp}; }  // q, k, dq, dk rows
  Width v() const { return {Dv, Dvp}; }  // v, out, dout, dv rows
};

Layout make_layout(const Tensor& q, const Tensor& k, const Tensor& v,
                   const ops::FlashAttentionParams& p);

// The dropout stream of ops::FlashAttentionParams.
struct Dropout {
  bool on = false;
  uint32_t keep_below = 0;
  float keep_scale = 1;
  uint64_t seed = 0, offset = 0;
  int64_t counters_per_row = 0;  // ceil(S / 4)
};
Dropout make_dropout(const Layout& L, const ops::FlashAttentionParams& p);

// A row block's per-column data: lim[i] the last key column i
// sees, counter[i] the Philox counter of its key 0. Padding columns
// (nr <= i < nc) copy the last row.
void block_columns(const Layout& L, const Dropout& dr, int64_t b, int64_t hk, int64_t r0,
                   int64_t nr, int64_t nc, int32_t* lim, uint64_t* counter);

// The tile mask of keys [k0, k0 + nk) against the row block starting at r0.
TileMask tile_mask(const Layout& L, const Dropout& dr, int64_t r0, int64_t k0, int64_t nk,
                   const int32_t* lim, const uint64_t* counter);

// Key s of kv head h (st: k or v strides).
template <typename T>
const T* row_ptr(const T* base, const int64_t* st, int64_t b, int64_t s, int64_t h) {
  return base + b * st[0] + s * st[1] + h * st[2];
}
// Query row r of kv head hk.
template <typename T>
const T* query_row(const Layout& L, const T* base, const QueryStrides& st, int64_t b, int64_t hk,
                   int64_t r) {
  return base + b * st.b + L.t_of(r) * st.t + hk * st.hk + (r % L.G) * st.g;
}

// sum_d a[d] * b[d] in f32, in kLanes partial sums (so it vectorises).
template <typename T>
float row_dot(const T* a, const T* b, int64_t n) {
  constexpr int L = kLanes<float>;
  float acc[L] = {};
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int j = 0; j < L; ++j) acc[j] += ld<float>(a, i + j) * ld<float>(b, i + j);
  float s = 0;
  for (; i < n; ++i) s += ld<float>(a, i) * ld<float>(b, i);
  for (int j = 0; j < L; ++j) s += acc[j];
  return s;
}

// dst[d][i] = scale * row(r0 + i)[d] for d < w.d, i < nr; zero for nr <= i < nc.
template <typename T>
void pack_transposed(const Layout& L, Width w, const T* base, const QueryStrides& st, int64_t b,
                     int64_t hk, int64_t r0, int64_t nr, int64_t nc, float scale, float* dst) {
  for (int64_t i = 0; i < nr; ++i) {
    const T* row = query_row(L, base, st, b, hk, r0 + i);
    for (int64_t d = 0; d < w.d; ++d) dst[d * nc + i] = ld<float>(row, d) * scale;
  }
  for (int64_t d = 0; d < w.d; ++d) std::fill(dst + d * nc + nr, dst + (d + 1) * nc, 0.0f);
}

// dst[i][d] = row(r0 + i)[d] (leading dim w.dp, zero beyond w.d).
template <typename T>
void pack_rows(const Layout& L, Width w, const T* base, const QueryStrides& st, int64_t b,
               int64_t hk, int64_t r0, int64_t nr, float* dst) {
  for (int64_t i = 0; i < nr; ++i) {
    const T* row = query_row(L, base, st, b, hk, r0 + i);
    float* out = dst + i * w.dp;
    for (int64_t d = 0; d < w.d; ++d) out[d] = ld<float>(row, d);
    std::fill(out + w.d, out + w.dp, 0.0f);
  }
}

// Keys [k0, k0 + nk) of kv head hk (rows of w.d) as f32 rows: the tensor
// itself for f32 (ld = its row stride), else converted into buf (ld = w.d).
template <typename T>
const float* kv_rows(Width w, const T* base, const int64_t* st, int64_t b, int64_t hk, int64_t k0,
                     int64_t nk, float* buf, int64_t& ld_out) {
  const T* first = row_ptr(base, st, b, k0, hk);
  if constexpr (std::is_same_v<T, float>) {
    ld_out = st[1];
    return first;
  } else {
    for (int64_t j = 0; j < nk; ++j)
      for (int64_t d = 0; d < w.d; ++d) buf[j * w.d + d] = ld<float>(first + j * st[1], d);
    ld_out = w.d;
    return buf;
  }
}

// bf16 pair packs for the AVX512-BF16 products, as raw bf16 bits.
// dst[d / 2][i][2] = row(r0 + i)[d] for i < nr (w.d even); zero for nr <= i < nc.
void pack_pairs_transposed(const Layout& L, Width w, const BFloat16* base, const QueryStrides& st,
                           int64_t b, int64_t hk, int64_t r0, int64_t nr, int64_t nc,
                           uint16_t* dst);
// dst[i / 2][d][2] = row(r0 + i)[d], leading dim w.dp (zero beyond w.d, and
// the partner of the last row when nr is odd).
void pack_row_pairs(const Layout& L, Width w, const BFloat16* base, const QueryStrides& st,
                    int64_t b, int64_t hk, int64_t r0, int64_t nr, uint16_t* dst);
// Every key (rows of w.d) of (b, hk), paired along the keys: dst[s / 2][d][2]
// (zero past S).
void pack_key_pairs(const Layout& L, Width w, const BFloat16* base, const int64_t* st, int64_t b,
                    int64_t hk, uint16_t* dst);
inline int64_t key_pairs(const Layout& L) { return (L.S + 1) / 2; }

// One thread's tiles, carved from one f32 tensor (64-byte aligned, and
// counted in the device's memory statistics like any tensor).
class Scratch {
 public:
  explicit Scratch(int64_t floats) : mem_(empty({std::max<int64_t>(floats, 1)}, DType::f32)) {}
  // The next n floats, 64-byte aligned.
  float* take(int64_t n) {
    float* p = mem_.data_ptr<float>() + used_;
    used_ += size_of(n);
    return p;
  }
  // n bf16 (as raw bits), 64-byte aligned.
  uint16_t* take_bf16(int64_t n) { return reinterpret_cast<uint16_t*>(take((n + 1) / 2)); }
  static int64_t size_of(int64_t n) { return round_up(n, 16); }
  static int64_t size_of_bf16(int64_t n) { return size_of((n + 1) / 2); }

 private:
  Tensor mem_;
  int64_t used_ = 0;
};

// Runs item(i, scratch) for i in [0, n) on the thread pool, items handed out
// one at a time (causal blocks differ in cost); each thread builds its own
// scratch with make_scratch() once.
template <typename MakeScratch, typename Item>
void run_items(int64_t n, MakeScratch&& make_scratch, Item&& item) {
  if (n <= 0) return;
  std::atomic<int64_t> next{0};
  const int64_t workers = std::min<int64_t>(num_threads(), n);
  parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    auto scratch = make_scratch();
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) item(i, *scratch);
  });
}

}  // namespace qk::cpu::flash
