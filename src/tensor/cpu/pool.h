// CPU pooling kernels, NCHW. Called by src/tensor/pool.cc after validation:
// x and grad_out are contiguous, output sizes are computed by the front.
// Every floating dtype runs natively (f16/bf16 accumulate in float).
#pragma once

#include <array>
#include <utility>

#include "qk/tensor/ops/conv.h"

namespace qk::cpu {

// out [N,C,Ho,Wo] and i64 indices (ih*W + iw within each plane; -1 for a
// dilated window that misses the input, which backward skips).
std::pair<Tensor, Tensor> max_pool2d(const Tensor& x, const ops::Pool2dParams& p, int64_t ho,
                                     int64_t wo);
Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& indices);
Tensor avg_pool2d(const Tensor& x, const ops::Pool2dParams& p, int64_t ho, int64_t wo);
Tensor avg_pool2d_backward(const Tensor& grad_out, const Tensor& x, const ops::Pool2dParams& p);
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> out_size);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Tensor& x);

}  // namespace qk::cpu
