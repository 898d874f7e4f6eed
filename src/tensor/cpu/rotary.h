// CPU rotary position embedding (Megatron's non-interleaved "rotate_half"
// form): the first R dims of each head rotate by position t's angles, the
// rest pass through.
#pragma once

#include "qk/tensor/tensor.h"

namespace qk::cpu {

// x [B,T,H,D] with its last dim contiguous (other strides free: q/k may be
// slices of a fused QKV projection); cos, sin [T,R] contiguous, f32 (or f64
// for an f64 x). Returns a contiguous [B,T,H,D] in x's dtype:
//   forward:  y = x * cos + rotate_half(x) * sin   on dims [0, R)
//   backward: the transpose of that linear map applied to the gradient.
Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin, bool backward);

}  // namespace qk::cpu
