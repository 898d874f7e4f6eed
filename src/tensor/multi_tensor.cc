// The multi-tensor passes' fronts (qk/tensor/ops/optimizer.h): the checks a
// backend kernel may rely on, then the device's kernel.
#include <string>

#include "qk/base/error.h"
#include "qk/tensor/ops/optimizer.h"

namespace qk::ops {

namespace {

Device check_tensors(const std::vector<Tensor>& tensors, const char* op) {
  QK_CHECK(!tensors.empty(), op, ": expected at least one tensor");
  const Device d = tensors[0].device();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    QK_CHECK(t.defined(), op, ": tensor ", i, " is undefined");
    QK_CHECK_DEVICE(t.device() == d, op, ": tensor ", i, " is on ", t.device().str(), ", tensor 0 on ", d.str(),
                    "; one call takes the tensors of one device");
    const DType dt = t.dtype();
    QK_CHECK_TYPE(dt == DType::f32 || dt == DType::f64 || dt == DType::bf16 || dt == DType::f16, op, ": tensor ",
                  i, " is ", dtype_name(dt), "; expected f32, f64, bf16 or f16");
    QK_CHECK(t.is_contiguous(), op, ": tensor ", i, " is not contiguous");
  }
  return d;
}

}  // namespace

Tensor multi_tensor_unscale_norm_(const std::vector<Tensor>& tensors, double scale) {
  const Device d = check_tensors(tensors, "multi_tensor_unscale_norm_");
  Tensor out = zeros({2}, TensorOptions().dtype(DType::f64).device(d));
  multi_tensor_unscale_norm_kernel.get(d)(tensors, scale, out);
  if (scale != 1.0)
    for (const Tensor& t : tensors) t.bump_version();
  return out;
}

void multi_tensor_scale_(const std::vector<Tensor>& tensors, double scale) {
  const Device d = check_tensors(tensors, "multi_tensor_scale_");
  multi_tensor_scale_kernel.get(d)(tensors, scale);
  for (const Tensor& t : tensors) t.bump_version();
}

}  // namespace qk::ops
