// Flash-attention forward on the CPU (FlashAttention-2's loop order).
//
// One work item is a block of up to kBlockQ query rows of one (batch, kv head):
// Q^T is packed once (scaled by scale * log2 e), then for each key block that
// the rows can see:
//   S^T = K Q^T                      (keys x rows, the SIMD GEMM)
//   online softmax over the keys     (running max m and sum l; O^T rescaled)
//   O^T += V^T P^T                   (head dims x rows)
// and finally O = O^T / l, transposed into the output, and lse = m + log l.
// O has V's head dim Dv, which may differ from Q/K's D.
// Only one item's tiles live at a time (about 50 KB per thread at D = 64),
// never a T x S matrix; key blocks past a row block's causal limit are
// skipped. Items are handed out dynamically, heaviest (latest rows) first.
// bf16 inputs on a CPU with AVX512-BF16 (and even D) run both products on
// bf16 pairs: Q paired along D, V along the keys (packed once per call), P
// rounded to bf16 per tile; the scale then applies to S in the softmax step.
#include <cmath>
#include <limits>

#include "cpu/flash_attention.h"
#include "cpu/flash_attention_layout.h"

namespace qk::cpu {
namespace {

using namespace flash;

// One thread's tiles.
struct FwdTiles {
  Scratch mem;
  float *qt, *ot, *s, *kbuf, *vbuf, *m, *l;
  int32_t* lim;
  uint64_t* counter;
  uint16_t *qpairs, *ppairs;  // the bf16-product operands
  explicit FwdTiles(const Layout& L)
      : mem(Scratch::size_of(L.D * kBlockQ) + Scratch::size_of(L.Dv * kBlockQ) +
            Scratch::size_of(kBlockK * kBlockQ) + Scratch::size_of(kBlockK * L.D) +
            Scratch::size_of(kBlockK * L.Dv) + Scratch::size_of(kBlockQ) * 3 +
            Scratch::size_of(2 * kBlockQ) + Scratch::size_of_bf16(L.D * kBlockQ) +
            Scratch::size_of_bf16(kBlockK * kBlockQ)) {
    qt = mem.take(L.D * kBlockQ);
    ot = mem.take(L.Dv * kBlockQ);
    s = mem.take(kBlockK * kBlockQ);
    kbuf = mem.take(kBlockK * L.D);
    vbuf = mem.take(kBlockK * L.Dv);
    m = mem.take(kBlockQ);
    l = mem.take(kBlockQ);
    lim = reinterpret_cast<int32_t*>(mem.take(kBlockQ));
    counter = reinterpret_cast<uint64_t*>(mem.take(2 * kBlockQ));
    qpairs = mem.take_bf16(L.D * kBlockQ);
    ppairs = mem.take_bf16(kBlockK * kBlockQ);
  }
};

// kDot: bf16 inputs through the AVX512-BF16 products (Q, K, V and P as bf16
// pairs, f32 accumulation); otherwise every product in f32.
template <typename T, bool kDot>
void forward_impl(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& lse, const ops::FlashAttentionParams& p) {
  const Layout L = make_layout(q, k, v, p);
  const Dropout dr = make_dropout(L, p);
  const Leaves& lv = leaves();
  const T* qp = q.data_ptr<T>();
  const T* kp = k.data_ptr<T>();
  const T* vp = v.data_ptr<T>();
  T* op = out.data_ptr<T>();
  float* lp = lse.data_ptr<float>();
  const int64_t nqb = L.q_blocks();
  const float qscale = L.scale * kLog2e;
  const float ninf = -std::numeric_limits<float>::infinity();

  // V^T as the A operand of O^T += V^T P^T: pairs along the keys, per head.
  const int64_t vpair_stride = key_pairs(L) * 2 * L.Dv;
  Tensor vpairs_mem = empty({kDot ? L.B * L.Hkv * key_pairs(L) * L.Dv : 0}, DType::i32);
  uint16_t* vpairs = reinterpret_cast<uint16_t*>(vpairs_mem.raw_data());
  if constexpr (kDot) {
    parallel_for(0, L.B * L.Hkv, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t h = lo; h < hi; ++h)
        pack_key_pairs(L, L.v(), vp, L.vs, h / L.Hkv, h % L.Hkv, vpairs + h * vpair_stride);
    });
  }

  auto item = [&](int64_t it, FwdTiles& w) {
    const int64_t qb = nqb - 1 - it % nqb, hk = it / nqb % L.Hkv, b = it / nqb / L.Hkv;
    const int64_t r0 = qb * kBlockQ, nr = std::min(kBlockQ, L.R - r0);
    const int64_t nc = round_up(nr, kColPad);
    const int64_t kv_end = L.kv_end(r0, nr);
    block_columns(L, dr, b, hk, r0, nr, nc, w.lim, w.counter);
    if constexpr (kDot)
      pack_pairs_transposed(L, L.qk(), qp, L.qs, b, hk, r0, nr, nc, w.qpairs);
    else
      pack_transposed(L, L.qk(), qp, L.qs, b, hk, r0, nr, nc, qscale, w.qt);
    std::fill(w.m, w.m + nc, ninf);
    std::fill(w.l, w.l + nc, 0.0f);
    std::fill(w.ot, w.ot + L.Dv * nc, 0.0f);
    for (int64_t k0 = 0; k0 < kv_end; k0 += kBlockK) {
      const int64_t nk = std::min(kBlockK, kv_end - k0);
      const TileMask mk = tile_mask(L, dr, r0, k0, nk, w.lim, w.counter);
      if constexpr (kDot) {
        const uint16_t* kb = &row_ptr(kp, L.ks, b, k0, hk)->bits;
        lv.bf16->gemm({nk, nc, L.D / 2, kb, L.ks[1], 2, w.qpairs, nc, w.s, nc, false});
        lv.softmax_update(w.s, qscale, nk, nc, mk, w.m, w.l, w.ot, L.Dv);
        lv.bf16->to_bf16_row_pairs(w.s, nk, nc, w.ppairs);
        const uint16_t* vb = vpairs + (b * L.Hkv + hk) * vpair_stride + k0 * L.Dv;
        lv.bf16->gemm({L.Dv, nc, (nk + 1) / 2, vb, 2, 2 * L.Dv, w.ppairs, nc, w.ot, nc, true});
      } else {
        int64_t ldk = 0, ldv = 0;
        const float* kb = kv_rows(L.qk(), kp, L.ks, b, hk, k0, nk, w.kbuf, ldk);
        const float* vb = kv_rows(L.v(), vp, L.vs, b, hk, k0, nk, w.vbuf, ldv);
        lv.gemm({nk, nc, L.D, kb, ldk, 1, w.qt, nc, w.s, nc, false});  // S^T = K Q^T
        lv.softmax_update(w.s, 1.0f, nk, nc, mk, w.m, w.l, w.ot, L.Dv);
        lv.gemm({L.Dv, nc, nk, vb, 1, ldv, w.s, nc, w.ot, nc, true});  // O^T += V^T P^T
      }
    }
    for (int64_t i = 0; i < nr; ++i) {
      const int64_t t = L.t_of(r0 + i), hq = L.hq_of(hk, r0 + i);
      const float li = w.l[i];
      const float inv = li > 0 ? 1.0f / li : 0.0f;  // a row that sees no key: zeros
      T* orow = op + ((b * L.T + t) * L.Hq + hq) * L.Dv;
      for (int64_t d = 0; d < L.Dv; ++d) st(orow, d, w.ot[d * nc + i] * inv);
      lp[(b * L.Hq + hq) * L.T + t] =
          li > 0 ? (w.m[i] + std::log2(li)) * static_cast<float>(M_LN2) : ninf;
    }
  };
  run_items(L.B * L.Hkv * nqb, [&] { return std::make_unique<FwdTiles>(L); }, item);
}

}  // namespace

ops::FlashAttentionResult flash_attention_forward(const Tensor& q, const Tensor& k,
                                                  const Tensor& v,
                                                  const ops::FlashAttentionParams& p) {
  const int64_t B = q.size(0), T = q.size(1), D = q.size(-1), Dv = v.size(-1);
  const int64_t Hq = q.dim() == 5 ? q.size(2) * q.size(3) : q.size(2);
  Tensor out = empty({B, T, Hq, Dv}, TensorOptions(q.dtype()).device(q.device()));
  Tensor lse = empty({B, Hq, T}, TensorOptions(DType::f32).device(q.device()));
  dispatch_floating(q.dtype(), "flash_attention", [&](auto tag) {
    using T_ = decltype(tag);
    if constexpr (std::is_same_v<T_, double>) {
      QK_THROW(TypeError, "flash_attention: f64 is not supported; use f32, bf16 or f16");
    } else {
      if constexpr (std::is_same_v<T_, BFloat16>) {
        if (flash::leaves().bf16 != nullptr && D % 2 == 0) {
          forward_impl<T_, true>(q, k, v, out, lse, p);
          return;
        }
      }
      forward_impl<T_, false>(q, k, v, out, lse, p);
    }
  });
  return {out, lse};
}

}  // namespace qk::cpu
