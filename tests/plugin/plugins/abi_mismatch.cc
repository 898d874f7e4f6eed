// An entry point as a future qianka with another extension ABI writes it.
#include "qk/ops/extension.h"

namespace {
void init(qk::ops::Library&) {}
}  // namespace

extern "C" __attribute__((visibility("default"))) const qk::ops::ExtensionEntry*
qk_extension_entry() {
  static const qk::ops::ExtensionEntry entry{qk::ops::kExtensionAbiVersion + 98, "9.9.9",
                                             sizeof(qk::Tensor), qk::ops::kCxx11StringAbi,
                                             "test_abi", &init};
  return &entry;
}
