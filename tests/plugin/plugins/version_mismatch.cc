// The same extension ABI, but built against another qianka release.
#include "qk/ops/extension.h"

namespace {
void init(qk::ops::Library&) {}
}  // namespace

extern "C" __attribute__((visibility("default"))) const qk::ops::ExtensionEntry*
qk_extension_entry() {
  static const qk::ops::ExtensionEntry entry{qk::ops::kExtensionAbiVersion, "0.0.1-other",
                                             sizeof(qk::Tensor), qk::ops::kCxx11StringAbi,
                                             "test_version", &init};
  return &entry;
}
