// CPU flash attention (forward in flash_attention_fwd.cc, backward in
// flash_attention_bwd.cc, the SIMD tile kernels in flash_attention_simd.cc).
// Inputs come validated from the front (src/tensor/attention.cc): 4-d,
// one dtype (f32/bf16/f16), last dim contiguous, scale resolved.
#pragma once

#include <tuple>

#include "qk/tensor/ops/attention.h"

namespace qk::cpu {

ops::FlashAttentionResult flash_attention_forward(const Tensor& q, const Tensor& k,
                                                  const Tensor& v,
                                                  const ops::FlashAttentionParams& p);
std::tuple<Tensor, Tensor, Tensor> flash_attention_backward(const Tensor& dout, const Tensor& q,
                                                            const Tensor& k, const Tensor& v,
                                                            const Tensor& out, const Tensor& lse,
                                                            const ops::FlashAttentionParams& p);

}  // namespace qk::cpu
