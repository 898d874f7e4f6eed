// A plugin whose registration fails (a bad schema): nothing of it is registered.
#include "qk/plugin/extension.h"

namespace {
qk::Tensor identity(const qk::Tensor& x) { return x.clone(); }
}  // namespace

QK_EXTENSION(test_throws, lib) {
  lib.def("fine(Tensor x) -> Tensor").kernel(qk::DeviceType::cpu, identity);
  lib.def("broken(Tensor x, complex z) -> Tensor");
}
