// Raw (non-differentiable) view and layout ops. Views share storage; the
// differentiable versions are Tensor methods (qk/autograd).
#pragma once

#include "qk/tensor/tensor.h"

namespace qk::ops {

Tensor as_strided(const Tensor& a, const Shape& sizes, const Shape& strides, int64_t offset);
// Shape may hold one -1. view() needs compatible strides; reshape() copies when it must.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op);
Tensor view(const Tensor& a, const Shape& shape);
Tensor reshape(const Tensor& a, const Shape& shape);
Tensor permute(const Tensor& a, const Shape& dims);
Tensor transpose(const Tensor& a, int64_t d0, int64_t d1);
Tensor expand(const Tensor& a, const Shape& shape);  // -1 keeps a dim
Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& a, int64_t dim, int64_t index);
Tensor unsqueeze(const Tensor& a, int64_t dim);
Tensor squeeze(const Tensor& a, int64_t dim);
Tensor flatten(const Tensor& a, int64_t start_dim, int64_t end_dim);

// Copies (strided -> contiguous, casting). contiguous() returns a itself when
// it is contiguous already (or undefined), as PyTorch's Tensor.contiguous().
Tensor contiguous(const Tensor& a);
Tensor clone(const Tensor& a);
Tensor cast(const Tensor& a, DType t);
Tensor to_device(const Tensor& a, Device d, bool non_blocking = false);
// dst <- src, broadcasting src to dst's shape and converting dtype.
// non_blocking: across devices with the host side pinned, queued on the
// device's stream without waiting (Tensor::to(Device, bool)).
void copy_(const Tensor& dst, const Tensor& src, bool non_blocking = false);
void fill_(const Tensor& dst, double value);

// Broadcast shape of a and b (numpy rules); throws naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace qk::ops
