// oneDNN convolutions (f32, and bf16 where the CPU has the kernels), used by the CPU conv kernels when qianka is
// built with oneDNN (QK_HAVE_DNNL). Without it available() is false and the
// functions throw, so callers need no #ifdef.
//
// Primitives are created once per (problem shape, phase, layout) and cached,
// together with their reorders and the buffers in oneDNN's blocked layout;
// a cached entry is locked while it runs, so threads may share the cache.
// oneDNN (OpenMP runtime) gets qk::num_threads() threads on every call.
#pragma once

#include <tuple>

#include "tensor/cpu/conv.h"

namespace qk::cpu::onednn {

// True when built with oneDNN and a CPU engine could be created.
bool available();
// True when convolutions in `dt` run through oneDNN on this CPU (f32 always
// when available(); bf16 when oneDNN has kernels for it here).
bool supports(DType dt);

// Layout of the tensors oneDNN computes on: `blocked` lets it choose (its
// fastest kernels; inputs and outputs are reordered from and to NCHW),
// `plain` forces NCHW/OIHW (no reorders, slower kernels).
enum class Layout : uint8_t { blocked, plain };

// x [N,C,H,W], w [O,C/G,kh,kw], b [O] or undefined; all contiguous, one
// dtype for which supports() holds.
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeom& g,
                      Layout layout = Layout::blocked);
std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& grad_out, const Tensor& x,
                                                   const Tensor& w, const ConvGeom& g,
                                                   bool need_dx, bool need_dw, bool need_db,
                                                   Layout layout = Layout::blocked);

// Drops every cached primitive and buffer (tests, memory pressure).
void clear_cache();

}  // namespace qk::cpu::onednn
