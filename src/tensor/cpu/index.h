// CPU joining and indexing kernels. Called by src/tensor/index.cc after
// validation of shapes and dtypes: every tensor is contiguous, dims are
// wrapped; index values are range-checked here (IndexError naming the op).
#pragma once

#include <utility>
#include <vector>

#include "qk/tensor/tensor.h"

namespace qk::cpu {

// Inputs share dtype and all dims but `dim`; out_shape is the joined shape.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim, const Shape& out_shape);
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index);
Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
std::pair<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim, bool largest, bool sorted);
Tensor one_hot(const Tensor& index, int64_t num_classes);

}  // namespace qk::cpu
