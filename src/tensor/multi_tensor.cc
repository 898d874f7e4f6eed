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

namespace {

// The optimizer lists' rules (qk/tensor/ops/optimizer.h): `list` (named
// `what`) has one tensor per parameter, like it, or is empty when `optional`.
void check_state_list(const char* op, const char* what, const std::vector<Tensor>& list,
                      const std::vector<Tensor>& params, bool optional) {
  if (optional && list.empty()) return;
  QK_CHECK(list.size() == params.size(), op, ": ", list.size(), " ", what, " for ", params.size(), " parameters");
  for (size_t i = 0; i < list.size(); ++i) {
    const Tensor& t = list[i];
    const Tensor& p = params[i];
    QK_CHECK(t.defined(), op, ": ", what, " ", i, " is undefined");
    QK_CHECK_DEVICE(t.device() == p.device(), op, ": ", what, " ", i, " is on ", t.device().str(),
                    ", its parameter on ", p.device().str());
    QK_CHECK_TYPE(t.dtype() == p.dtype(), op, ": ", what, " ", i, " is ", dtype_name(t.dtype()),
                  ", its parameter ", dtype_name(p.dtype()));
    QK_CHECK(t.shape() == p.shape(), op, ": ", what, " ", i, " has shape ", shape_str(t.shape()),
             ", its parameter ", shape_str(p.shape()));
    QK_CHECK(t.is_contiguous(), op, ": ", what, " ", i, " is not contiguous");
  }
}

Device check_params(const char* op, const std::vector<Tensor>& params) {
  QK_CHECK(!params.empty(), op, ": expected at least one parameter");
  const Device d = params[0].device();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    QK_CHECK(p.defined(), op, ": parameter ", i, " is undefined");
    QK_CHECK_DEVICE(p.device() == d, op, ": parameter ", i, " is on ", p.device().str(), ", parameter 0 on ",
                    d.str(), "; one call takes the parameters of one device");
    QK_CHECK_TYPE(p.dtype() == DType::f32 || p.dtype() == DType::f64, op, ": parameter ", i, " is ",
                  dtype_name(p.dtype()), "; expected f32 or f64");
    QK_CHECK(p.is_contiguous(), op, ": parameter ", i, " is not contiguous");
  }
  return d;
}

}  // namespace

void multi_tensor_sgd_step_(const SgdStepLists& l, const SgdStepArgs& a) {
  const char* op = "multi_tensor_sgd_step_";
  const Device d = check_params(op, l.params);
  check_state_list(op, "gradients", l.grads, l.params, false);
  check_state_list(op, "momentum buffers", l.momentum_bufs, l.params, a.momentum == 0);
  if (multi_tensor_sgd_step_kernel.supports(d.type)) return multi_tensor_sgd_step_kernel.get(d)(l, a);
  for (size_t i = 0; i < l.params.size(); ++i)
    sgd_step_kernel.get(d)(l.params[i], l.grads[i], a.momentum != 0 ? l.momentum_bufs[i] : Tensor(), a);
}

void multi_tensor_adam_step_(const AdamStepLists& l, const AdamStepArgs& a) {
  const char* op = "multi_tensor_adam_step_";
  const Device d = check_params(op, l.params);
  check_state_list(op, "gradients", l.grads, l.params, false);
  check_state_list(op, "exp_avg tensors", l.exp_avgs, l.params, false);
  check_state_list(op, "exp_avg_sq tensors", l.exp_avg_sqs, l.params, false);
  check_state_list(op, "max_exp_avg_sq tensors", l.max_exp_avg_sqs, l.params, !a.amsgrad);
  if (multi_tensor_adam_step_kernel.supports(d.type)) return multi_tensor_adam_step_kernel.get(d)(l, a);
  for (size_t i = 0; i < l.params.size(); ++i)
    adam_step_kernel.get(d)(l.params[i], l.grads[i], l.exp_avgs[i], l.exp_avg_sqs[i],
                            a.amsgrad ? l.max_exp_avg_sqs[i] : Tensor(), a);
}

}  // namespace qk::ops
