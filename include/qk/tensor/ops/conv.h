// Raw convolution and pooling, NCHW, with their backward kernels.
#pragma once

#include <array>
#include <tuple>

#include "qk/tensor/tensor.h"

namespace qk {

// The parameter structs live in qk, not qk::ops, so that argument-dependent
// lookup of conv2d(x, w, b, params) finds only qk::conv2d (the differentiable
// one) and never makes an unqualified call ambiguous with ops::conv2d.
struct Conv2dParams {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};

struct Pool2dParams {
  std::array<int64_t, 2> kernel{2, 2};
  std::array<int64_t, 2> stride{2, 2};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};  // max pool only
  bool ceil_mode = false;
  bool count_include_pad = true;          // avg pool only
};

namespace ops {

using ::qk::Conv2dParams;
using ::qk::Pool2dParams;

// x [N,C,H,W], w [O,C/groups,kh,kw], b [O] or undefined -> [N,O,Ho,Wo].
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p);
// Returns (dx, dw, db); each computed only if its flag is set (else undefined).
std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& grad_out, const Tensor& x,
                                                   const Tensor& w, const Conv2dParams& p,
                                                   bool need_dx, bool need_dw, bool need_db);

// Inference fusion of a convolution with what commonly follows it:
//   y = relu?(conv2d(x, w, b) * scale[o] + shift[o] + residual)
// scale, shift [O] (both or neither; an eval-mode batch norm folded into a
// per-channel affine map), residual [N,O,Ho,Wo] or undefined, all in x's
// dtype. The CPU runs it as one oneDNN convolution with post-ops where it can
// (no separate passes over the output); there is no backward.
Tensor conv2d_fused(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p,
                    const Tensor& scale, const Tensor& shift, const Tensor& residual, bool relu);

// Returns (out, indices) with indices i64 flat positions in each input plane.
std::pair<Tensor, Tensor> max_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& indices);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& grad_out, const Tensor& x, const Pool2dParams& p);
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> out_size);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Tensor& x);

}  // namespace ops
}  // namespace qk
