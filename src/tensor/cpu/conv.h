// CPU convolution kernels: im2col + GEMM (every floating dtype, the f64
// path and the fallback) and oneDNN (f32, when built with it), with a
// per-shape choice between them.
//
// Note [Conv algorithm choice]: measured on SimpleCNN's layers (bench/
// conv_bench.cc on the 2-core development VM, Intel Xeon with AVX-512,
// 2026-11-30; numbers in docs/benchmarks.md, "GEMM and convolution"). With 8 or more input
// channels per group, oneDNN in its blocked layouts is 4-10x faster than
// im2col+GEMM forward and ~5x backward (CPU time, one thread), so f32 uses
// it. A layer with fewer (SimpleCNN's 3-channel conv1) has little work per
// channel block: forward runs oneDNN on plain NCHW (no reorders, fastest),
// backward runs im2col, within 2x of oneDNN on one thread but the only one
// that stays fast on a loaded machine, where oneDNN's OpenMP barriers on
// this shape took 0.1-2 s. The rule is static, so a run is reproducible;
// QK_CONV_ALGO forces one algorithm. f64 (and every dtype without oneDNN)
// uses im2col.
#pragma once

#include <cstdint>
#include <tuple>

#include "qk/tensor/ops/conv.h"

namespace qk::cpu {

// Shape legend: N batch, C/O input/output channels, G groups (Cg = C/G,
// Og = O/G), H,W input and Ho,Wo output size, kh,kw kernel.
struct ConvGeom {
  int64_t n, c, h, w, o, kh, kw, ho, wo, g;
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t cg() const { return c / g; }
  int64_t og() const { return o / g; }
};
// x [N,C,H,W], w [O,C/G,kh,kw]; shapes validated by the front (src/tensor/conv.cc).
ConvGeom conv_geom(const Tensor& x, const Tensor& w, const ops::Conv2dParams& p);

// Entry points of the kernel table: pick an algorithm, run it. x, w,
// grad_out are contiguous; reduced floats are computed in f32.
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                      const ops::Conv2dParams& p);
std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& grad_out, const Tensor& x,
                                                   const Tensor& w, const ops::Conv2dParams& p,
                                                   bool need_dx, bool need_dw, bool need_db);

// ops::conv2d_fused on the CPU: operands validated and contiguous.
Tensor conv2d_fused(const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dParams& p,
                    const Tensor& scale, const Tensor& shift, const Tensor& residual, bool relu);

// The im2col + GEMM implementation (f32, f64).
Tensor conv2d_forward_im2col(const Tensor& x, const Tensor& w, const Tensor& b,
                             const ops::Conv2dParams& p);
std::tuple<Tensor, Tensor, Tensor> conv2d_backward_im2col(const Tensor& grad_out,
                                                          const Tensor& x, const Tensor& w,
                                                          const ops::Conv2dParams& p,
                                                          bool need_dx, bool need_dw,
                                                          bool need_db);

// db [O] = sum of grad_out [N,O,Ho,Wo] over N, Ho, Wo.
Tensor conv2d_bias_grad(const Tensor& grad_out);

// onednn: oneDNN in its blocked layouts; onednn_plain: oneDNN on NCHW as is.
enum class ConvAlgo : uint8_t { im2col, onednn, onednn_plain };
const char* conv_algo_name(ConvAlgo a);
enum class ConvPhase : uint8_t { forward, backward };
// The algorithm used for this problem (see Note [Conv algorithm choice]).
ConvAlgo conv_algo_for(const ConvGeom& g, DType dt, ConvPhase phase);

}  // namespace qk::cpu
