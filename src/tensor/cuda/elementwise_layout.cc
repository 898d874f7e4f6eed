#include "elementwise_layout.h"

#include <array>

#include "cpu/loops.h"
#include "qk/base/error.h"

namespace qk::cuda {

namespace {

// The CPU loops' layout (cpu/loops.h: broadcast, size-1 dims dropped,
// contiguous neighbours merged), copied into the kernels' plain struct.
template <int N>
ElementwiseLayout from_cpu_layout(std::initializer_list<const Tensor*> operands, const char* op) {
  std::array<Tensor, N> ts;
  int k = 0;
  for (const Tensor* t : operands) ts[k++] = *t;
  const cpu::StridedLayout<N> L = cpu::make_layout<N>(ts[0].shape(), ts);
  QK_CHECK_DEVICE(L.shape.size() <= static_cast<size_t>(kMaxDims), op, " on CUDA: ", L.shape.size(),
                  " dimensions that cannot be merged; the kernels take at most ", kMaxDims,
                  " (make the tensors contiguous first)");
  ElementwiseLayout l;
  l.ndim = static_cast<int>(L.shape.size());
  l.numel = ts[0].numel();
  for (int d = 0; d < l.ndim; ++d) {
    l.sizes[d] = L.shape[d];
    for (int j = 0; j < N; ++j) l.strides[j][d] = L.strides[j][d];
  }
  return l;
}

}  // namespace

ElementwiseLayout make_layout(std::initializer_list<const Tensor*> operands, const char* op) {
  switch (operands.size()) {
    case 2: return from_cpu_layout<2>(operands, op);
    case 3: return from_cpu_layout<3>(operands, op);
    case 4: return from_cpu_layout<4>(operands, op);
  }
  QK_THROW(InternalError, op, ": ", operands.size(), " operands; the CUDA loops take 2 to ", kMaxOperands);
}

}  // namespace qk::cuda
