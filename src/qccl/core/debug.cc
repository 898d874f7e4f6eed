#include "core/debug.h"

#include <mutex>

#include "qccl.h"

namespace qccl {

void log_version_once() {
  if (!qk::logging::version_requested()) return;
  static std::once_flag once;
  std::call_once(once, [] {
    // Asked for by name, so written whatever the level.
    qk::logging::write(qk::logging::Level::info, "INIT",
                       fmt::format("qccl version {}.{}.{}", QCCL_MAJOR, QCCL_MINOR, QCCL_PATCH));
  });
}

}  // namespace qccl
