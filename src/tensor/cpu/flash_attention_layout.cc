// Geometry, masks and the dropout stream shared by the flash-attention drivers.
#include "cpu/flash_attention_layout.h"

namespace qk::cpu::flash {

QueryStrides query_strides(const Tensor& x, int64_t G) {
  QueryStrides s;
  s.b = x.stride(0);
  s.t = x.stride(1);
  if (x.dim() == 5) {  // [B, T, Hkv, G, D]
    s.hk = x.stride(2);
    s.g = x.stride(3);
  } else {  // [B, T, Hq, D]: query head hk * G + g
    s.hk = G * x.stride(2);
    s.g = x.stride(2);
  }
  return s;
}

Layout make_layout(const Tensor& q, const Tensor& k, const Tensor& v,
                   const ops::FlashAttentionParams& p) {
  Layout L;
  L.B = q.size(0);
  L.T = q.size(1);
  L.S = k.size(1);
  L.Hkv = k.size(2);
  L.D = k.size(3);
  L.Dv = v.size(3);
  L.Hq = q.dim() == 5 ? q.size(2) * q.size(3) : q.size(2);
  L.G = L.Hq / L.Hkv;
  L.R = L.T * L.G;
  L.Dp = round_up(L.D, kColPad);
  L.Dvp = round_up(L.Dv, kColPad);
  L.causal = p.causal;
  L.scale = static_cast<float>(p.scale);
  L.qs = query_strides(q, L.G);
  for (int i = 0; i < 3; ++i) {
    L.ks[i] = k.stride(i);
    L.vs[i] = v.stride(i);
  }
  return L;
}

Dropout make_dropout(const Layout& L, const ops::FlashAttentionParams& p) {
  Dropout dr;
  dr.on = p.dropout_p > 0;
  if (!dr.on) return dr;
  // As ops::dropout: keep iff the top 24 bits, as a fraction of 2^24, are < 1 - p.
  dr.keep_below = static_cast<uint32_t>((1.0 - p.dropout_p) * 16777216.0);
  dr.keep_scale = p.dropout_p < 1 ? static_cast<float>(1.0 / (1.0 - p.dropout_p)) : 0.0f;
  dr.seed = p.seed;
  dr.offset = p.offset;
  if (p.offset_base.defined()) dr.offset += static_cast<uint64_t>(p.offset_base.data_ptr<int64_t>()[0]);
  dr.counters_per_row = (L.S + 3) / 4;
  return dr;
}

void block_columns(const Layout& L, const Dropout& dr, int64_t b, int64_t hk, int64_t r0,
                   int64_t nr, int64_t nc, int32_t* lim, uint64_t* counter) {
  for (int64_t i = 0; i < nc; ++i) {
    const int64_t r = r0 + std::min(i, nr - 1);
    const int64_t t = L.t_of(r);
    lim[i] = static_cast<int32_t>(std::max<int64_t>(L.last_key(t), -1));
    if (dr.on) {
      const int64_t row = (b * L.Hq + L.hq_of(hk, r)) * L.T + t;
      counter[i] = dr.offset + static_cast<uint64_t>(row) * static_cast<uint64_t>(dr.counters_per_row);
    }
  }
}

TileMask tile_mask(const Layout& L, const Dropout& dr, int64_t r0, int64_t k0, int64_t nk,
                   const int32_t* lim, const uint64_t* counter) {
  TileMask mk;
  mk.k0 = k0;
  // Only a tile that crosses the diagonal of its first row needs the mask.
  mk.causal = L.causal && k0 + nk - 1 > L.last_key(L.t_of(r0));
  mk.lim = lim;
  mk.dropout = dr.on;
  mk.keep_below = dr.keep_below;
  mk.keep_scale = dr.keep_scale;
  mk.seed = dr.seed;
  mk.counter = counter;
  return mk;
}

void pack_pairs_transposed(const Layout& L, Width w, const BFloat16* base, const QueryStrides& st,
                           int64_t b, int64_t hk, int64_t r0, int64_t nr, int64_t nc,
                           uint16_t* dst) {
  // A pair is 32 adjacent bits in the row: transpose 32-bit words.
  const int64_t pairs = w.d / 2;
  for (int64_t i = 0; i < nr; ++i) {
    const BFloat16* row = query_row(L, base, st, b, hk, r0 + i);
    for (int64_t p = 0; p < pairs; ++p) std::memcpy(dst + 2 * (p * nc + i), row + 2 * p, 4);
  }
  for (int64_t p = 0; p < pairs; ++p) std::fill(dst + 2 * (p * nc + nr), dst + 2 * (p + 1) * nc, 0);
}

void pack_row_pairs(const Layout& L, Width w, const BFloat16* base, const QueryStrides& st,
                    int64_t b, int64_t hk, int64_t r0, int64_t nr, uint16_t* dst) {
  for (int64_t i = 0; i < round_up(nr, 2); ++i) {
    uint16_t* out = dst + (i / 2) * 2 * w.dp + i % 2;
    if (i == nr) {
      for (int64_t d = 0; d < w.dp; ++d) out[2 * d] = 0;
      continue;
    }
    const BFloat16* row = query_row(L, base, st, b, hk, r0 + i);
    for (int64_t d = 0; d < w.d; ++d) out[2 * d] = row[d].bits;
    for (int64_t d = w.d; d < w.dp; ++d) out[2 * d] = 0;
  }
}

void pack_key_pairs(const Layout& L, Width w, const BFloat16* base, const int64_t* st, int64_t b,
                    int64_t hk, uint16_t* dst) {
  // Word d of pair row p holds key 2p's element d (low half) and key 2p+1's.
  for (int64_t p = 0; p < key_pairs(L); ++p) {
    const BFloat16* lo = row_ptr(base, st, b, 2 * p, hk);
    const BFloat16* hi = 2 * p + 1 < L.S ? lo + st[1] : nullptr;
    uint32_t* out = reinterpret_cast<uint32_t*>(dst) + p * w.d;
    if (hi != nullptr) {
      for (int64_t d = 0; d < w.d; ++d)
        out[d] = static_cast<uint32_t>(lo[d].bits) | static_cast<uint32_t>(hi[d].bits) << 16;
    } else {
      for (int64_t d = 0; d < w.d; ++d) out[d] = lo[d].bits;
    }
  }
}

}  // namespace qk::cpu::flash
