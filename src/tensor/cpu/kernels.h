// CPU kernels of the core ops (the fronts in src/tensor/*.cc validate and
// dispatch here). Other areas declare theirs in their own cpu/*.h.
#pragma once

#include <optional>

#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/tensor.h"

namespace qk::cpu {

// dst <- src (src broadcast to dst's shape, cast to dst's dtype).
void copy(const Tensor& dst, const Tensor& src);
void fill(const Tensor& dst, double value);

// out is allocated by the front with the broadcast shape.
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b);
void unary(UnaryOp op, const Tensor& out, const Tensor& a);
void unary_backward(UnaryOp op, const Tensor& dx, const Tensor& grad, const Tensor& x,
                    const Tensor& y);
void clamp(const Tensor& out, const Tensor& a, std::optional<double> lo, std::optional<double> hi);
void clamp_backward(const Tensor& dx, const Tensor& grad, const Tensor& x,
                    std::optional<double> lo, std::optional<double> hi);
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
// self += alpha * other (other broadcast to self).
void add_inplace(const Tensor& self, const Tensor& other, double alpha);

// Reductions: `out` has keepdim shape (reduced dims of size 1).
enum class ReduceOp : uint8_t { sum, mean, amax, amin };
void reduce(ReduceOp op, const Tensor& out, const Tensor& a, const Shape& dims);
void max_min_dim(bool is_max, const Tensor& values, const Tensor& indices, const Tensor& a,
                 int64_t dim);

}  // namespace qk::cpu
