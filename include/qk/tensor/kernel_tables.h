// The kernel tables of the core ops, for backends to register into.
//
// A new device backend (CUDA, or another vendor's GPU under privateuse1)
// implements qk::Backend (allocate/copy/synchronize), calls
// register_backend(), and sets the kernels it supports:
//
//   qk::ops::fill_kernel.set(qk::DeviceType::privateuse1, &my_fill);
//   qk::ops::binary_kernel.set(qk::DeviceType::privateuse1, &my_binary);
//
// Every op it does not register raises "'<table>' is not implemented for
// device <dev>", so a backend can grow op by op (tests/tensor/backend_plugin_test.cc).
#pragma once

#include "qk/tensor/dispatch.h"
#include "qk/tensor/ops/conv.h"
#include "qk/tensor/ops/elementwise.h"

namespace qk::ops {

// dst <- src; both on the backend's device (cross-device copies go through Backend::copy).
using CopyFn = void(const Tensor& dst, const Tensor& src);
using FillFn = void(const Tensor& dst, double value);
// out (preallocated, broadcast shape) <- a op b.
using BinaryFn = void(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b);
using UnaryFn = void(UnaryOp op, const Tensor& out, const Tensor& a);
// out (preallocated, a's shape; may be a itself) <- a op b, b converted to
// a's dtype first. Optional: devices without it get binary_kernel with a 0-d
// tensor (one fill more; a GPU registers it to save that launch).
using BinaryScalarFn = void(BinaryOp op, const Tensor& out, const Tensor& a, double b);

QK_DECLARE_KERNEL(copy_kernel, CopyFn);
QK_DECLARE_KERNEL(fill_kernel, FillFn);
QK_DECLARE_KERNEL(binary_kernel, BinaryFn);
QK_DECLARE_KERNEL(unary_kernel, UnaryFn);
QK_DECLARE_KERNEL(binary_scalar_kernel, BinaryScalarFn);

// Matrix products (src/tensor/linalg.cc): inputs validated, any strides.
using MmFn = Tensor(const Tensor& a, const Tensor& b);                        // mm, bmm
using LinearFn = Tensor(const Tensor& x, const Tensor& w, const Tensor& b);  // x [R,in]
QK_DECLARE_KERNEL(mm_kernel, MmFn);
QK_DECLARE_KERNEL(bmm_kernel, MmFn);
QK_DECLARE_KERNEL(linear_kernel, LinearFn);

// Convolution (src/tensor/conv.cc): x, w, grad_out contiguous, f32/f64.
using Conv2dFwdFn = Tensor(const Tensor& x, const Tensor& w, const Tensor& b,
                           const Conv2dParams& p);
using Conv2dBwdFn = std::tuple<Tensor, Tensor, Tensor>(const Tensor& grad_out, const Tensor& x,
                                                       const Tensor& w, const Conv2dParams& p,
                                                       bool need_dx, bool need_dw, bool need_db);
QK_DECLARE_KERNEL(conv2d_fwd_kernel, Conv2dFwdFn);
QK_DECLARE_KERNEL(conv2d_bwd_kernel, Conv2dBwdFn);

}  // namespace qk::ops
