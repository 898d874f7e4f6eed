// CPU SwiGLU (Megatron's): x [..., 2F] -> silu(x[..., :F]) * x[..., F:].
#pragma once

#include "qk/tensor/tensor.h"

namespace qk::cpu {

// x contiguous [rows, 2F] (any leading shape) -> [..., F] in x's dtype.
Tensor swiglu(const Tensor& x);
// grad [..., F], x [..., 2F], both contiguous -> dx [..., 2F].
Tensor swiglu_backward(const Tensor& grad, const Tensor& x);

}  // namespace qk::cpu
