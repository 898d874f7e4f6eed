// An entry point as a future qianka with another extension ABI writes it.
#include "qk/plugin/extension.h"

namespace {
void init(qk::plugin::Library&) {}
}  // namespace

extern "C" __attribute__((visibility("default"))) const qk::plugin::ExtensionEntry*
qk_extension_entry() {
  static const qk::plugin::ExtensionEntry entry{qk::plugin::kExtensionAbiVersion + 98, "9.9.9",
                                                sizeof(qk::Tensor), qk::plugin::kCxx11StringAbi,
                                                "test_abi", &init};
  return &entry;
}
