// Flash-attention backward on the CPU: FlashAttention-2's recomputation
// (P from the saved logsumexp, delta_i = rowsum(dO_i * O_i)) with the query
// blocks outermost, so that nothing is written by two threads.
//
// One work item is (batch, kv head, a range of query blocks). Per query block
// it packs Q^T (scaled by scale * log2 e), dO^T, Q, dO and the row statistics
// once, then for every key block the rows see:
//   S^T  = K Q^T,  P^T = exp2(S^T - lse)   (dropout: Z from the same stream)
//   dV  += (P Z)^T dO
//   dP^T = V dO^T,  dS^T = P^T (dP^T Z - delta)
//   dK  += dS^T Q
//   dQ^T += K^T dS^T
// dQ of the block is final when its key loop ends (each query block belongs to
// one item). dK/dV accumulate over the item's query blocks in f32: when every
// thread has whole (batch, kv head) pairs to itself they go straight to the
// outputs, otherwise each range writes a partial that a last pass sums.
// With AVX512-BF16 the five products take bf16 pairs (K paired along the keys
// once per call; P, P Z and dS rounded to bf16 per tile), as in the forward.
// V, O, dO and dV have head dim Dv, Q, K, dQ and dK D (they may differ).
#include <cmath>
#include <vector>

#include "cpu/flash_attention.h"
#include "cpu/flash_attention_layout.h"

namespace qk::cpu {
namespace {

using namespace flash;

struct BwdTiles {
  Scratch mem;
  float *qt, *dot, *qr, *dor, *s, *dp, *pz, *z, *dqt, *kbuf, *vbuf, *lse2, *delta;
  int32_t* lim;
  uint64_t* counter;
  float *dk, *dv;  // [S][Dp] and [S][Dvp] accumulators when the item owns its kv head
  // The bf16-product operands: Q and dO paired along D (transposed) and along
  // the rows, P (or P Z) and dS as bf16 rows, dS paired along the keys.
  uint16_t *qpairs, *dopairs, *qrows, *dorows, *abf, *dspairs;
  BwdTiles(const Layout& L, bool own_dkv)
      : mem(Scratch::size_of(L.D * kBlockQ) * 2 + Scratch::size_of(L.Dv * kBlockQ) +
            Scratch::size_of(kBlockQ * L.Dp) + Scratch::size_of(kBlockQ * L.Dvp) +
            Scratch::size_of(kBlockK * kBlockQ) * 4 + Scratch::size_of(kBlockK * L.D) +
            Scratch::size_of(kBlockK * L.Dv) + Scratch::size_of(kBlockQ) * 3 + Scratch::size_of(2 * kBlockQ) +
            (own_dkv ? Scratch::size_of(L.S * L.Dp) + Scratch::size_of(L.S * L.Dvp) : 0) +
            Scratch::size_of_bf16(L.D * kBlockQ) + Scratch::size_of_bf16(L.Dv * kBlockQ) +
            Scratch::size_of_bf16(kBlockQ * L.Dp) + Scratch::size_of_bf16(kBlockQ * L.Dvp) +
            Scratch::size_of_bf16(kBlockK * kBlockQ) * 2) {
    qt = mem.take(L.D * kBlockQ);
    dot = mem.take(L.Dv * kBlockQ);
    dqt = mem.take(L.D * kBlockQ);
    qr = mem.take(kBlockQ * L.Dp);
    dor = mem.take(kBlockQ * L.Dvp);
    s = mem.take(kBlockK * kBlockQ);
    dp = mem.take(kBlockK * kBlockQ);
    pz = mem.take(kBlockK * kBlockQ);
    z = mem.take(kBlockK * kBlockQ);
    kbuf = mem.take(kBlockK * L.D);
    vbuf = mem.take(kBlockK * L.Dv);
    lse2 = mem.take(kBlockQ);
    delta = mem.take(kBlockQ);
    lim = reinterpret_cast<int32_t*>(mem.take(kBlockQ));
    counter = reinterpret_cast<uint64_t*>(mem.take(2 * kBlockQ));
    dk = own_dkv ? mem.take(L.S * L.Dp) : nullptr;
    dv = own_dkv ? mem.take(L.S * L.Dvp) : nullptr;
    qpairs = mem.take_bf16(L.D * kBlockQ);
    dopairs = mem.take_bf16(L.Dv * kBlockQ);
    qrows = mem.take_bf16(kBlockQ * L.Dp);
    dorows = mem.take_bf16(kBlockQ * L.Dvp);
    abf = mem.take_bf16(kBlockK * kBlockQ);
    dspairs = mem.take_bf16(kBlockK * kBlockQ);
  }
};

// Splits query blocks [0, nqb) into `parts` ranges of about equal work
// (a block's work is the number of key blocks it sees). Returns parts + 1 bounds.
std::vector<int64_t> split_blocks(const Layout& L, int64_t parts) {
  const int64_t nqb = L.q_blocks();
  std::vector<int64_t> cost(nqb + 1, 0);
  for (int64_t qb = 0; qb < nqb; ++qb) {
    const int64_t r0 = qb * kBlockQ, nr = std::min(kBlockQ, L.R - r0);
    cost[qb + 1] = cost[qb] + 1 + (L.kv_end(r0, nr) + kBlockK - 1) / kBlockK;
  }
  std::vector<int64_t> bounds(parts + 1, nqb);
  bounds[0] = 0;
  int64_t qb = 0;
  for (int64_t s = 1; s < parts; ++s) {
    while (qb < nqb && cost[qb] * parts < cost[nqb] * s) ++qb;
    bounds[s] = qb;
  }
  return bounds;
}

// kDot: bf16 inputs through the AVX512-BF16 products (operands as bf16
// pairs, P and dS rounded to bf16 as FlashAttention-2 does, f32 accumulation).
template <typename T, bool kDot>
void backward_impl(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                   const Tensor& dv, const ops::FlashAttentionParams& p) {
  const Layout L = make_layout(q, k, v, p);
  const Dropout dr = make_dropout(L, p);
  const Leaves& lv = leaves();
  const T* qp = q.data_ptr<T>();
  const T* kp = k.data_ptr<T>();
  const T* vp = v.data_ptr<T>();
  const T* gp = dout.data_ptr<T>();
  const T* op = out.data_ptr<T>();
  const QueryStrides gs = query_strides(dout, L.G), os = query_strides(out, L.G);
  const float* lp = lse.data_ptr<float>();
  T* dqp = dq.data_ptr<T>();
  T* dkp = dk.data_ptr<T>();
  T* dvp = dv.data_ptr<T>();
  const int64_t nqb = L.q_blocks(), heads = L.B * L.Hkv;
  const float qscale = L.scale * kLog2e;

  // Whole heads per item when there are enough to keep every thread busy.
  const int64_t nth = num_threads();
  const int64_t parts = nth == 1 || heads >= 2 * nth
                            ? 1
                            : std::clamp<int64_t>((4 * nth + heads - 1) / heads, 1, nqb);
  const std::vector<int64_t> bounds = split_blocks(L, parts);

  // K^T as the A operand of dQ^T += K^T dS^T: pairs along the keys, per head.
  const int64_t kpair_stride = key_pairs(L) * 2 * L.D;
  Tensor kpairs_mem = empty({kDot ? heads * key_pairs(L) * L.D : 0}, DType::i32);
  uint16_t* kpairs = reinterpret_cast<uint16_t*>(kpairs_mem.raw_data());
  if constexpr (kDot) {
    parallel_for(0, heads, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t h = lo; h < hi; ++h)
        pack_key_pairs(L, L.qk(), kp, L.ks, h / L.Hkv, h % L.Hkv, kpairs + h * kpair_stride);
    });
  }
  const bool own_dkv = parts == 1;
  // Partials [heads][parts][dk [S][Dp] | dv [S][Dvp]] when heads are split.
  const int64_t partial_size = L.S * (L.Dp + L.Dvp);
  Tensor partial_mem = empty({own_dkv ? 0 : heads * parts * partial_size}, DType::f32);
  float* partial = partial_mem.data_ptr<float>();

  auto write_rows = [&](T* dst, const int64_t* dst_st, Width w, int64_t b, int64_t hk, const float* acc,
                        float mul) {
    for (int64_t s = 0; s < L.S; ++s) {
      T* row = dst + b * dst_st[0] + s * dst_st[1] + hk * dst_st[2];
      for (int64_t d = 0; d < w.d; ++d) st(row, d, acc[s * w.dp + d] * mul);
    }
  };
  // dk and dv are contiguous.
  const int64_t dks[3] = {L.S * L.Hkv * L.D, L.Hkv * L.D, L.D};
  const int64_t dvs[3] = {L.S * L.Hkv * L.Dv, L.Hkv * L.Dv, L.Dv};

  auto item = [&](int64_t it, BwdTiles& w) {
    const int64_t part = it % parts, head = it / parts, hk = head % L.Hkv, b = head / L.Hkv;
    const int64_t qb_lo = bounds[part], qb_hi = bounds[part + 1];
    float* dk_acc = own_dkv ? w.dk : partial + (head * parts + part) * partial_size;
    float* dv_acc = own_dkv ? w.dv : dk_acc + L.S * L.Dp;
    std::fill(dk_acc, dk_acc + L.S * L.Dp, 0.0f);
    std::fill(dv_acc, dv_acc + L.S * L.Dvp, 0.0f);
    for (int64_t qb = qb_lo; qb < qb_hi; ++qb) {
      const int64_t r0 = qb * kBlockQ, nr = std::min(kBlockQ, L.R - r0);
      const int64_t nc = round_up(nr, kColPad);
      const int64_t kv_end = L.kv_end(r0, nr);
      block_columns(L, dr, b, hk, r0, nr, nc, w.lim, w.counter);
      if constexpr (kDot) {
        pack_pairs_transposed(L, L.qk(), qp, L.qs, b, hk, r0, nr, nc, w.qpairs);
        pack_pairs_transposed(L, L.v(), gp, gs, b, hk, r0, nr, nc, w.dopairs);
        pack_row_pairs(L, L.qk(), qp, L.qs, b, hk, r0, nr, w.qrows);
        pack_row_pairs(L, L.v(), gp, gs, b, hk, r0, nr, w.dorows);
      } else {
        pack_transposed(L, L.qk(), qp, L.qs, b, hk, r0, nr, nc, qscale, w.qt);
        pack_transposed(L, L.v(), gp, gs, b, hk, r0, nr, nc, 1.0f, w.dot);
        pack_rows(L, L.qk(), qp, L.qs, b, hk, r0, nr, w.qr);
        pack_rows(L, L.v(), gp, gs, b, hk, r0, nr, w.dor);
      }
      for (int64_t i = 0; i < nc; ++i) {
        if (i >= nr) {  // padding columns: P = 1, dS = 0, no NaN
          w.lse2[i] = 0;
          w.delta[i] = 0;
          continue;
        }
        const int64_t t = L.t_of(r0 + i), hq = L.hq_of(hk, r0 + i);
        const float l = lp[(b * L.Hq + hq) * L.T + t];
        // A row that saw no key: P = exp2(s - inf) = 0 everywhere.
        w.lse2[i] = std::isinf(l) && l < 0 ? std::numeric_limits<float>::infinity() : l * kLog2e;
        w.delta[i] = row_dot(query_row(L, gp, gs, b, hk, r0 + i),
                             query_row(L, op, os, b, hk, r0 + i), L.Dv);
      }
      std::fill(w.dqt, w.dqt + L.D * nc, 0.0f);
      for (int64_t k0 = 0; k0 < kv_end; k0 += kBlockK) {
        const int64_t nk = std::min(kBlockK, kv_end - k0);
        const TileMask mk = tile_mask(L, dr, r0, k0, nk, w.lim, w.counter);
        float* dv_rows = dv_acc + k0 * L.Dvp;
        float* dk_rows = dk_acc + k0 * L.Dp;
        if constexpr (kDot) {
          const Bf16Leaves& bf = *lv.bf16;
          const int64_t nr2 = (nr + 1) / 2, nk2 = (nk + 1) / 2;
          const uint16_t* kb = &row_ptr(kp, L.ks, b, k0, hk)->bits;
          const uint16_t* vb = &row_ptr(vp, L.vs, b, k0, hk)->bits;
          bf.gemm({nk, nc, L.D / 2, kb, L.ks[1], 2, w.qpairs, nc, w.s, nc, false});  // S^T
          lv.probs(w.s, qscale, w.pz, w.z, nk, nc, mk, w.lse2);                     // P^T
          bf.to_bf16(dr.on ? w.pz : w.s, nk, nc, w.abf);
          bf.gemm({nk, L.Dvp, nr2, w.abf, nc, 2, w.dorows, L.Dvp, dv_rows, L.Dvp, true});  // dV
          bf.gemm({nk, nc, L.Dv / 2, vb, L.vs[1], 2, w.dopairs, nc, w.dp, nc, false});  // dP^T
          lv.dscores(w.s, w.dp, dr.on ? w.z : nullptr, nk, nc, w.delta);           // dS^T
          bf.to_bf16(w.dp, nk, nc, w.abf);
          bf.gemm({nk, L.Dp, nr2, w.abf, nc, 2, w.qrows, L.Dp, dk_rows, L.Dp, true});  // dK
          bf.to_bf16_row_pairs(w.dp, nk, nc, w.dspairs);
          const uint16_t* kt = kpairs + head * kpair_stride + k0 * L.D;
          bf.gemm({L.D, nc, nk2, kt, 2, 2 * L.D, w.dspairs, nc, w.dqt, nc, true});  // dQ^T
        } else {
          int64_t ldk = 0, ldv = 0;
          const float* kb = kv_rows(L.qk(), kp, L.ks, b, hk, k0, nk, w.kbuf, ldk);
          const float* vb = kv_rows(L.v(), vp, L.vs, b, hk, k0, nk, w.vbuf, ldv);
          lv.gemm({nk, nc, L.D, kb, ldk, 1, w.qt, nc, w.s, nc, false});  // S^T = K Q^T
          lv.probs(w.s, 1.0f, w.pz, w.z, nk, nc, mk, w.lse2);            // s = P^T
          const float* pz = dr.on ? w.pz : w.s;
          lv.gemm({nk, L.Dvp, nr, pz, nc, 1, w.dor, L.Dvp, dv_rows, L.Dvp, true});  // dV += (PZ)^T dO
          lv.gemm({nk, nc, L.Dv, vb, ldv, 1, w.dot, nc, w.dp, nc, false});  // dP^T = V dO^T
          lv.dscores(w.s, w.dp, dr.on ? w.z : nullptr, nk, nc, w.delta);  // dp = dS^T
          lv.gemm({nk, L.Dp, nr, w.dp, nc, 1, w.qr, L.Dp, dk_rows, L.Dp, true});  // dK += dS^T Q
          lv.gemm({L.D, nc, nk, kb, 1, ldk, w.dp, nc, w.dqt, nc, true});  // dQ^T += K^T dS^T
        }
      }
      for (int64_t i = 0; i < nr; ++i) {
        const int64_t t = L.t_of(r0 + i), hq = L.hq_of(hk, r0 + i);
        T* row = dqp + ((b * L.T + t) * L.Hq + hq) * L.D;
        for (int64_t d = 0; d < L.D; ++d) st(row, d, w.dqt[d * nc + i] * L.scale);
      }
    }
    if (own_dkv) {
      write_rows(dkp, dks, L.qk(), b, hk, dk_acc, L.scale);
      write_rows(dvp, dvs, L.v(), b, hk, dv_acc, 1.0f);
    }
  };
  run_items(heads * parts, [&] { return std::make_unique<BwdTiles>(L, own_dkv); }, item);
  if (own_dkv) return;

  // Sum the ranges' partials: one (head, 64-key block) per task.
  const int64_t kb_count = (L.S + kBlockK - 1) / kBlockK;
  parallel_for(0, heads * kb_count, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> dk_sum(kBlockK * L.Dp), dv_sum(kBlockK * L.Dvp);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t head = task / kb_count, k0 = task % kb_count * kBlockK;
      const int64_t nk = std::min(kBlockK, L.S - k0);
      std::fill(dk_sum.begin(), dk_sum.end(), 0.0f);
      std::fill(dv_sum.begin(), dv_sum.end(), 0.0f);
      for (int64_t part = 0; part < parts; ++part) {
        const float* src_k = partial + (head * parts + part) * partial_size + k0 * L.Dp;
        const float* src_v = partial + (head * parts + part) * partial_size + L.S * L.Dp + k0 * L.Dvp;
        for (int64_t e = 0; e < nk * L.Dp; ++e) dk_sum[e] += src_k[e];
        for (int64_t e = 0; e < nk * L.Dvp; ++e) dv_sum[e] += src_v[e];
      }
      const int64_t b = head / L.Hkv, hk = head % L.Hkv;
      for (int64_t j = 0; j < nk; ++j) {
        T* krow = dkp + b * dks[0] + (k0 + j) * dks[1] + hk * dks[2];
        T* vrow = dvp + b * dvs[0] + (k0 + j) * dvs[1] + hk * dvs[2];
        for (int64_t d = 0; d < L.D; ++d) st(krow, d, dk_sum[j * L.Dp + d] * L.scale);
        for (int64_t d = 0; d < L.Dv; ++d) st(vrow, d, dv_sum[j * L.Dvp + d]);
      }
    }
  });
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> flash_attention_backward(const Tensor& dout, const Tensor& q,
                                                            const Tensor& k, const Tensor& v,
                                                            const Tensor& out, const Tensor& lse,
                                                            const ops::FlashAttentionParams& p) {
  const TensorOptions opts = TensorOptions(q.dtype()).device(q.device());
  if (q.numel() == 0 || k.numel() == 0)  // no rows, or no keys: nothing flows
    return {zeros(q.shape(), opts), zeros(k.shape(), opts), zeros(v.shape(), opts)};
  Tensor dq = empty(q.shape(), opts), dk = empty(k.shape(), opts), dv = empty(v.shape(), opts);
  dispatch_floating(q.dtype(), "flash_attention_backward", [&](auto tag) {
    using T_ = decltype(tag);
    if constexpr (std::is_same_v<T_, double>) {
      QK_THROW(TypeError, "flash_attention_backward: f64 is not supported; use f32, bf16 or f16");
    } else {
      if constexpr (std::is_same_v<T_, BFloat16>) {
        // The products pair Q, K along D and dO along Dv.
        if (flash::leaves().bf16 != nullptr && q.size(-1) % 2 == 0 && v.size(-1) % 2 == 0) {
          backward_impl<T_, true>(dout, q, k, v, out, lse, dq, dk, dv, p);
          return;
        }
      }
      backward_impl<T_, false>(dout, q, k, v, out, lse, dq, dk, dv, p);
    }
  });
  return {dq, dk, dv};
}

}  // namespace qk::cpu
