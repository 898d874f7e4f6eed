// A well-formed plugin: test_ext::scale(x, alpha) = alpha * x with its
// backward, and test_ext::split_sum(x) = (x + 1, x - 1).
#include "qk/plugin/extension.h"
#include "qk/tensor/ops/elementwise.h"

namespace {

qk::Tensor scale_cpu(const qk::Tensor& x, double alpha) {
  return qk::ops::binary_scalar(qk::BinaryOp::mul, x, alpha);
}

std::vector<qk::Tensor> scale_backward(const qk::plugin::BackwardContext& ctx) {
  const double alpha = ctx.arg("alpha").to_double();
  return {qk::ops::binary_scalar(qk::BinaryOp::mul, ctx.grad(0), alpha), qk::Tensor()};
}

std::tuple<qk::Tensor, qk::Tensor> plus_minus_cpu(const qk::Tensor& x) {
  return {qk::ops::binary_scalar(qk::BinaryOp::add, x, 1.0),
          qk::ops::binary_scalar(qk::BinaryOp::sub, x, 1.0)};
}

}  // namespace

QK_EXTENSION(test_ext, lib) {
  lib.def("scale(Tensor x, float alpha=2.0) -> Tensor")
      .kernel(qk::DeviceType::cpu, scale_cpu)
      .backward(scale_backward);
  lib.def("plus_minus(Tensor x) -> (Tensor, Tensor)").kernel(qk::DeviceType::cpu, plus_minus_cpu);
}
