// oneDNN convolutions (f32, and bf16 where the CPU has the kernels), used by the CPU conv kernels when qianka is
// built with oneDNN (QK_HAVE_DNNL). Without it available() is false and the
// functions throw, so callers need no #ifdef.
//
// Primitives are created once per (problem shape, phase, layout) and cached,
// together with their reorders and the buffers in oneDNN's blocked layout;
// a cached entry is locked while it runs, so threads may share the cache.
// Scratchpads are the caller's (scratchpad_mode::user), taken from the tensor
// allocator per call, so its block cache keeps their pages mapped.
// oneDNN (OpenMP runtime) gets qk::num_threads() threads on every call.
#pragma once

#include <array>
#include <string>

#include <tuple>

#include "cpu/conv.h"

namespace qk::cpu::onednn {

// True when built with oneDNN and a CPU engine could be created.
bool available();
// True when convolutions in `dt` run through oneDNN on this CPU (f32 always
// when available(); bf16 when oneDNN has kernels for it here).
bool supports(DType dt);

// Layout of the tensors oneDNN computes on: `blocked` lets it choose (its
// fastest kernels; inputs and outputs are reordered from and to NCHW),
// `plain` forces NCHW/OIHW (no reorders, slower kernels), `channels_last`
// takes x and grad_out and gives y and dx stored NHWC (memory_format.h),
// reordered from and to oneDNN's choice as `blocked` is from NCHW. (Its
// NHWC-native kernels, primitives made on nhwc, trained ResNet-18 25-30%
// slower than its blocked ones with Winograd: oneDNN 2.6, 2 threads, the
// development VM's Xeon, 2026-12-06, same run.)
enum class Layout : uint8_t { blocked, plain, channels_last };

// x [N,C,H,W] (channels last with Layout::channels_last, else contiguous),
// w [O,C/G,kh,kw], b [O] or undefined contiguous; one dtype for which
// supports() holds.
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeom& g,
                      Layout layout = Layout::blocked);
std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& grad_out, const Tensor& x,
                                                   const Tensor& w, const ConvGeom& g,
                                                   bool need_dx, bool need_dw, bool need_db,
                                                   Layout layout = Layout::blocked);

// Work on a forward's output done inside the convolution (oneDNN post-ops,
// applied in oneDNN's blocked layout before the reorder to NCHW), for
// inference: y = relu?(conv * scale[o] + shift[o]). scale and shift
// contiguous, in x's dtype. (A residual sum is not among them: oneDNN 2.6's
// fast kernels take a sum post-op only first, and a full-tensor binary
// operand not at all, falling back to kernels 10-100x slower.)
struct Epilogue {
  Tensor scale, shift;  // [O]: both or neither
  bool relu = false;
};
// conv2d_forward with the epilogue fused in; an undefined tensor when oneDNN
// has no kernel for that combination (the caller then applies it itself).
Tensor conv2d_forward_fused(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeom& g,
                            Layout layout, const Epilogue& epi);

// Whether a forward of this shape and dtype may run oneDNN's Winograd kernels
// (Note [Winograd] in onednn_conv.cc): they take no per-channel post-ops, so
// conv2d_fused folds a batch norm into the weights for them instead.
bool winograd_applies(const ConvGeom& g, DType dt);
// Whether oneDNN actually picks Winograd for that forward with a bias and an
// optional ReLU post-op (it keeps direct kernels for small batches).
bool winograd_chosen(const ConvGeom& g, DType dt, bool relu);
// oneDNN's names of the kernels of a shape without bias: forward, backward
// data, backward weights ("jit_wino_4x3:avx512_core", ...; empty without oneDNN).
std::array<std::string, 3> kernel_names(const ConvGeom& g, DType dt, Layout layout);

// Drops every cached primitive and buffer (tests, memory pressure).
void clear_cache();

}  // namespace qk::cpu::onednn
