// QK_SYNC_DEBUG (qk/tensor/sync_debug.h): implicit host syncs are counted
// in every mode; warn logs them, error throws a DeviceError naming the
// device and what waited; off is silent.
#include "qk/tensor/sync_debug.h"

#include <gtest/gtest.h>

#include <string>

#include "qk/base/error.h"

namespace qk {
namespace {

TEST(SyncDebug, CountsInEveryModeAndThrowsOnlyUnderError) {
  const SyncDebugMode before = sync_debug_mode();
  const Device dev(DeviceType::privateuse1, 0);
  const int64_t n = host_sync_count();
  set_sync_debug_mode(SyncDebugMode::off);
  note_host_sync(dev, "a test read");
  set_sync_debug_mode(SyncDebugMode::warn);
  note_host_sync(dev, "a test read");
  set_sync_debug_mode(SyncDebugMode::error);
  try {
    note_host_sync(dev, "a test read");
    ADD_FAILURE() << "QK_SYNC_DEBUG=error must refuse the sync";
  } catch (const DeviceError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(dev.str()), std::string::npos) << m;
    EXPECT_NE(m.find("a test read"), std::string::npos) << m;
  }
  set_sync_debug_mode(before);
  EXPECT_EQ(host_sync_count(), n + 3);
}

}  // namespace
}  // namespace qk
