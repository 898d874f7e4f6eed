#include "elementwise_layout.h"

#include <vector>

#include "qk/base/error.h"

namespace qk::cuda {

ElementwiseLayout make_layout(std::initializer_list<const Tensor*> operands, const char* op) {
  const Shape& shape = (*operands.begin())->shape();
  const int nd = static_cast<int>(shape.size());
  const int nk = static_cast<int>(operands.size());
  std::vector<int64_t> sizes(shape.begin(), shape.end());
  std::vector<std::vector<int64_t>> strides(nk, std::vector<int64_t>(nd, 0));
  int k = 0;
  for (const Tensor* t : operands) {
    const int lead = nd - static_cast<int>(t->dim());
    for (int d = 0; d < static_cast<int>(t->dim()); ++d)
      strides[k][lead + d] = t->size(d) == 1 ? 0 : t->stride(d);
    ++k;
  }
  // Drop size-1 dimensions, then merge d into d+1 where every operand allows.
  std::vector<int> keep;
  for (int d = 0; d < nd; ++d)
    if (sizes[d] != 1) keep.push_back(d);
  ElementwiseLayout l;
  l.numel = 1;
  for (int64_t s : sizes) l.numel *= s;
  std::vector<int64_t> ms;
  std::vector<std::vector<int64_t>> mst(nk);
  for (int d : keep) {
    bool merge = !ms.empty();
    for (int j = 0; j < nk && merge; ++j) merge = mst[j].back() == strides[j][d] * sizes[d];
    if (merge) {
      ms.back() *= sizes[d];
      for (int j = 0; j < nk; ++j) mst[j].back() = strides[j][d];
    } else {
      ms.push_back(sizes[d]);
      for (int j = 0; j < nk; ++j) mst[j].push_back(strides[j][d]);
    }
  }
  QK_CHECK_DEVICE(static_cast<int>(ms.size()) <= kMaxDims, op, " on CUDA: ", ms.size(),
                  " dimensions that cannot be merged; the kernels take at most ", kMaxDims,
                  " (make the tensors contiguous first)");
  l.ndim = static_cast<int>(ms.size());
  for (int d = 0; d < l.ndim; ++d) {
    l.sizes[d] = ms[d];
    for (int j = 0; j < nk; ++j) l.strides[j][d] = mst[j][d];
  }
  return l;
}

}  // namespace qk::cuda
