// Device helpers both attention kernels use (attention.cu, the simple one;
// attention_tiled.cu, the tensor-core one): where a row of q starts, which
// keys a query sees, and the dropout factor of one probability, so the two
// agree with each other and with the CPU to the bit where they can.
#pragma once

#include <cstdint>

#include "attention_kernels.h"
#include "philox.cuh"

namespace qk::cuda {

__device__ __forceinline__ int64_t q_offset(const AttentionShape& a, int64_t b, int64_t t, int64_t h) {
  return b * a.q_sb + t * a.q_st + h / a.q_group * a.q_sh + h % a.q_group * a.q_sg;
}
// Row starts of the contiguous outputs: dq in q's shape (the grouped form's
// head hk * G + g is head h of [B, T, Hq, D] too), dk and dv [B, S, Hkv, *].
__device__ __forceinline__ int64_t row_major_q(const AttentionShape& a, int64_t b, int64_t t, int64_t h) {
  return ((b * a.T + t) * a.Hq + h) * a.D;
}
__device__ __forceinline__ int64_t row_kv(const AttentionShape& a, int64_t b, int64_t s, int64_t hk) {
  return (b * a.S + s) * a.Hkv + hk;
}
__device__ __forceinline__ int64_t kv_head(const AttentionShape& a, int64_t h) { return h / (a.Hq / a.Hkv); }
// Keys [0, kv_end) are visible to query t.
__device__ __forceinline__ int64_t kv_end(const AttentionShape& a, int64_t t) {
  if (!a.causal) return a.S;
  const int64_t e = t + (a.S - a.T) + 1;
  return e < 0 ? 0 : (e > a.S ? a.S : e);
}
// The dropout factor of probability (b, h, t, s): 0 or keep_scale.
__device__ __forceinline__ float dropout_factor(const AttentionShape& a, int64_t b, int64_t h, int64_t t, int64_t s) {
  if (!a.dropout_on) return 1.0f;
  const uint64_t row = static_cast<uint64_t>((b * a.Hq + h) * a.T + t);
  const uint64_t base = a.offset_base ? static_cast<uint64_t>(*a.offset_base) : 0;
  const uint64_t counter = a.offset + base + row * static_cast<uint64_t>((a.S + 3) / 4) + static_cast<uint64_t>(s / 4);
  return philox_keep(a.seed, counter, static_cast<int>(s % 4), a.keep_below) ? a.keep_scale : 0.0f;
}

}  // namespace qk::cuda
