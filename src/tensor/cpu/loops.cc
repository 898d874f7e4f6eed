#include "cpu/loops.h"

namespace qk::cpu {

Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  Shape out(shape.size(), 0);
  const auto& ts = t.shape();
  const auto& tst = t.strides();
  int64_t off = static_cast<int64_t>(shape.size()) - static_cast<int64_t>(ts.size());
  QK_INTERNAL_ASSERT(off >= 0, "operand has more dims than the iteration shape");
  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i] == shape[i + off]) out[i + off] = tst[i];
    else QK_INTERNAL_ASSERT(ts[i] == 1, "operand not broadcastable to the iteration shape");
  }
  return out;
}

}  // namespace qk::cpu
