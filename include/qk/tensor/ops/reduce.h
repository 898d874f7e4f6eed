// Raw reductions over any set of dims (empty dims = all dims).
// Floating inputs accumulate in f64 (whatever their dtype); integer sums
// accumulate in i64 and return i64.
#pragma once

#include <utility>

#include "qk/tensor/tensor.h"

namespace qk::ops {

Tensor sum(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
// Variance with Bessel's correction when `unbiased`.
Tensor var(const Tensor& a, const Shape& dims = {}, bool unbiased = true, bool keepdim = false);
Tensor amax(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
// Values and i64 indices of the max/min along one dim (first occurrence on ties).
std::pair<Tensor, Tensor> max_dim(const Tensor& a, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min_dim(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& a, int64_t dim, bool keepdim = false);
// Sums a broadcast result back to `shape` (the backward of broadcasting).
Tensor sum_to(const Tensor& a, const Shape& shape);

}  // namespace qk::ops
