// Raw joining, splitting and indexing ops.
#pragma once

#include <vector>

#include "qk/tensor/tensor.h"

namespace qk::ops {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim);
// Views of consecutive pieces of `split_size` along dim (the last may be smaller).
std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim);
std::vector<Tensor> split_with_sizes(const Tensor& a, const Shape& sizes, int64_t dim);
std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim);

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index);
// out = a with src rows added at `index` along dim (out-of-place index_add).
Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index);
// out = a, then out[index[i]][j] += src[i][j] along dim (out-of-place).
Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
// The k largest (or smallest) along dim: (values, i64 indices), sorted if asked.
std::pair<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim = -1, bool largest = true,
                               bool sorted = true);
Tensor one_hot(const Tensor& index, int64_t num_classes);

}  // namespace qk::ops
