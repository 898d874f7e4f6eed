// A plugin needing a qianka function the host does not have, as one built
// against another qianka version would.
#include "qk/plugin/extension.h"

namespace qk {
Tensor function_from_another_version(const Tensor& x);  // defined nowhere
}  // namespace qk

QK_EXTENSION(test_undefined, lib) {
  lib.def("f(Tensor x) -> Tensor").kernel(qk::DeviceType::cpu, qk::function_from_another_version);
}
