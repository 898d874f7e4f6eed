// Defines test_ext::scale again, as good_ops does: loading both is an error.
#include "qk/plugin/extension.h"

namespace {
qk::Tensor identity(const qk::Tensor& x, double) { return x.clone(); }
}  // namespace

QK_EXTENSION(test_ext, lib) {
  lib.def("scale(Tensor x, float alpha=2.0) -> Tensor").kernel(qk::DeviceType::cpu, identity);
}
