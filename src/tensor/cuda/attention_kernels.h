// Attention on CUDA (attention.cu): the shapes, strides and options of one
// call as plain data, for the kernel-table glue (attention_ops.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

namespace qk::cuda {

// q [B, T, Hq, D] (or the grouped [B, T, Hkv, G, D]), k [B, S, Hkv, D],
// v [B, S, Hkv, Dv], strides in elements, the last dim contiguous. Query
// head h sits at h / q_group * q_sh + h % q_group * q_sg (q_group 1 for a
// 4-D q) and reads kv head h / (Hq / Hkv).
struct AttentionShape {
  int64_t B = 0, T = 0, S = 0, Hq = 0, Hkv = 0, D = 0, Dv = 0;
  int64_t q_sb = 0, q_st = 0, q_sh = 0, q_sg = 0, q_group = 1;
  int64_t k_sb = 0, k_ss = 0, k_sh = 0;
  int64_t v_sb = 0, v_ss = 0, v_sh = 0;
  // out and dout [B, T, Hq, Dv] (the backward's; the forward writes a contiguous out).
  int64_t o_sb = 0, o_st = 0, o_sh = 0;
  int64_t g_sb = 0, g_st = 0, g_sh = 0;
  float scale = 1;
  bool causal = true;  // bottom-right: query t sees keys s <= t + (S - T)
  // Dropout on the probabilities (ops::FlashAttentionParams): keep_below 0
  // with dropout_on false means none.
  bool dropout_on = false;
  uint32_t keep_below = 0;
  float keep_scale = 1;
  uint64_t seed = 0, offset = 0;
  const int64_t* offset_base = nullptr;  // added to offset when the kernel runs (a graph's counters)
};

// The per-warp shared memory the kernels need is (D + Dv) floats (forward) and
// 2 (D + Dv) floats (backward); false when a head is too large for them.
bool attention_fits(int64_t D, int64_t Dv);

// out [B, T, Hq, Dv] contiguous in q's dtype, lse [B, Hq, T] f32.
void launch_attention_forward(const AttentionShape& a, int dtype, const void* q, const void* k, const void* v,
                              void* out, float* lse, cudaStream_t stream);
// dq (q's shape, contiguous), dk, dv (contiguous) in q's dtype; delta is
// scratch of B * Hq * T floats.
void launch_attention_backward(const AttentionShape& a, int dtype, const void* dout, const void* q, const void* k,
                               const void* v, const void* out, const float* lse, float* delta, void* dq, void* dk,
                               void* dv, cudaStream_t stream);

// delta[(b, h, t)] = sum over dims of dout * out, in f32 (the backward's first pass).
void launch_attention_delta(const AttentionShape& a, int dtype, const void* dout, const void* out, float* delta,
                            cudaStream_t stream);

// The tensor-core kernels (attention_tiled.cu): f16/bf16, D == Dv of 32, 64
// or 128, every row start 16-byte aligned (`ptrs`: the tensors' data).
// false sends the call to the kernels above.
bool tiled_attention_fits(const AttentionShape& a, int dtype, std::initializer_list<const void*> ptrs);
void launch_tiled_attention_forward(const AttentionShape& a, int dtype, const void* q, const void* k, const void* v,
                                    void* out, float* lse, cudaStream_t stream);
void launch_tiled_attention_backward(const AttentionShape& a, int dtype, const void* dout, const void* q,
                                     const void* k, const void* v, const void* out, const float* lse, float* delta,
                                     void* dq, void* dk, void* dv, cudaStream_t stream);

}  // namespace qk::cuda
