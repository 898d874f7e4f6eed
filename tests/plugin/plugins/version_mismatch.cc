// The same extension ABI, but built against another qianka release.
#include "qk/plugin/extension.h"

namespace {
void init(qk::plugin::Library&) {}
}  // namespace

extern "C" __attribute__((visibility("default"))) const qk::plugin::ExtensionEntry*
qk_extension_entry() {
  static const qk::plugin::ExtensionEntry entry{qk::plugin::kExtensionAbiVersion, "0.0.1-other",
                                                sizeof(qk::Tensor), qk::plugin::kCxx11StringAbi,
                                                "test_version", &init};
  return &entry;
}
