// CPU pooling kernels, NCHW (and NHWC below). Called by src/tensor/pool.cc after validation:
// x and grad_out are contiguous, output sizes are computed by the front.
// Every floating dtype runs natively (f16/bf16 accumulate in float).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "qk/tensor/ops/conv.h"

namespace qk::cpu {

// Avg-pool window of output index o along one axis, as PyTorch computes it:
// the padded extent (for count_include_pad) and the clipped one.
struct Window {
  int64_t start, end, padded;
};
inline Window avg_window(int64_t o, int64_t k, int64_t s, int64_t pad, int64_t in) {
  const int64_t start = o * s - pad;
  const int64_t end = std::min(start + k, in + pad);
  return {std::max<int64_t>(start, 0), std::min(end, in), end - start};
}
// The divisor of a 2-D average window: the padded extent or only the input it covers.
inline int64_t avg_count(const Window& h, const Window& w, bool count_include_pad) {
  return count_include_pad ? h.padded * w.padded : (h.end - h.start) * (w.end - w.start);
}

// out [N,C,Ho,Wo] and i64 indices (ih*W + iw within each plane; -1 for a
// dilated window that misses the input, which backward skips).
std::pair<Tensor, Tensor> max_pool2d(const Tensor& x, const ops::Pool2dParams& p, int64_t ho,
                                     int64_t wo);
Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& indices);
Tensor avg_pool2d(const Tensor& x, const ops::Pool2dParams& p, int64_t ho, int64_t wo);
Tensor avg_pool2d_backward(const Tensor& grad_out, const Tensor& x, const ops::Pool2dParams& p);
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> out_size);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Tensor& x);

// The same for channels-last tensors (pool_nhwc.cc): x, grad_out and
// indices in any layout (made channels last), results channels last; x of
// a backward gives only the shape.
std::pair<Tensor, Tensor> max_pool2d_nhwc(const Tensor& x, const ops::Pool2dParams& p, int64_t ho, int64_t wo);
Tensor max_pool2d_backward_nhwc(const Tensor& grad_out, const Tensor& x, const Tensor& indices);
Tensor avg_pool2d_nhwc(const Tensor& x, const ops::Pool2dParams& p, int64_t ho, int64_t wo);
Tensor avg_pool2d_backward_nhwc(const Tensor& grad_out, const Tensor& x, const ops::Pool2dParams& p);

}  // namespace qk::cpu
