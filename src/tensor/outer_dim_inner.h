// A shape seen as [outer, n, inner] around one dimension: the layout of the
// joining, indexing and softmax kernels along `dim`, on every backend.
#pragma once

#include <cstdint>

#include "qk/tensor/tensor.h"

namespace qk {

struct ONI {
  int64_t outer = 1, n = 1, inner = 1;
};

// A 0-d shape (dim 0) is [1, 1, 1].
inline ONI split_at(const Shape& s, int64_t dim) {
  ONI r;
  for (int64_t i = 0; i < dim; ++i) r.outer *= s[i];
  r.n = s.empty() ? 1 : s[dim];
  for (size_t i = dim + 1; i < s.size(); ++i) r.inner *= s[i];
  return r;
}

}  // namespace qk
