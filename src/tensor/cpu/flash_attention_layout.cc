// Geometry, masks and the dropout stream shared by the flash-attention drivers.
#include "tensor/cpu/flash_attention_layout.h"

namespace qk::cpu::flash {

Layout make_layout(const Tensor& q, const Tensor& k, const Tensor& v,
                   const ops::FlashAttentionParams& p) {
  Layout L;
  L.B = q.size(0);
  L.T = q.size(1);
  L.Hq = q.size(2);
  L.D = q.size(3);
  L.S = k.size(1);
  L.Hkv = k.size(2);
  L.G = L.Hq / L.Hkv;
  L.R = L.T * L.G;
  L.Dp = round_up(L.D, kColPad);
  L.causal = p.causal;
  L.scale = static_cast<float>(p.scale);
  for (int i = 0; i < 3; ++i) {
    L.qs[i] = q.stride(i);
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
  dr.counters_per_row = (L.S + 3) / 4;
  return dr;
}

void block_columns(const Layout& L, const Dropout& dr, int64_t b, int64_t hk, int64_t r0,
                   int64_t nr, int64_t nc, float* lim, uint64_t* counter) {
  for (int64_t i = 0; i < nc; ++i) {
    const int64_t r = r0 + std::min(i, nr - 1);
    const int64_t t = L.t_of(r);
    lim[i] = static_cast<float>(L.last_key(t));
    if (dr.on) {
      const int64_t row = (b * L.Hq + L.hq_of(hk, r)) * L.T + t;
      counter[i] = dr.offset + static_cast<uint64_t>(row) * static_cast<uint64_t>(dr.counters_per_row);
    }
  }
}

TileMask tile_mask(const Layout& L, const Dropout& dr, int64_t r0, int64_t k0, int64_t nk,
                   const float* lim, const uint64_t* counter) {
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

}  // namespace qk::cpu::flash
