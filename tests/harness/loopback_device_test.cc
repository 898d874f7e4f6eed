// The upper layers' device paths on a complete loopback device (every CPU
// kernel behind a second backend, on host memory; harness/loopback_backend.h)
// where there is no GPU: the CIFAR-10 trainer with --device on that device,
// in f32 and under bf16 and fp16 autocast (GradScaler's device path), ends
// with the CPU run's weights bit for bit, and pinned batches move without a
// wait. Tensors on two devices in one op raise, so a step that builds a
// tensor on the wrong device fails here before it does on a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/tiny_cifar.h"
#include "harness/loopback_backend.h"
#include "qk/base/file_io.h"
#include "qk/models/cifar10_trainer.h"
#include "qk/tensor/backend.h"

namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) / ("qk_loopback_" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

qk::models::TrainCifarOptions tiny(const std::string& data, const std::string& out, const std::string& device,
                                   const std::string& amp) {
  qk::models::TrainCifarOptions o = qk::test::tiny_cifar(data, out, 1);
  o.device = device;
  o.amp = amp;
  return o;
}

TEST(LoopbackDevice, CifarTrainingOnTheDeviceEndsWithTheCpusWeights) {
  qk::harness::install_complete_loopback();
  const std::string data = fresh_dir("data");
  for (const char* amp : {"off", "bf16", "fp16"}) {
    SCOPED_TRACE(amp);
    const std::string cpu = fresh_dir(std::string("cpu_") + amp), dev = fresh_dir(std::string("dev_") + amp);
    auto device_allocs = [] { return qk::backend(qk::DeviceType::privateuse1).memory_stats(0).num_allocs; };
    testing::internal::CaptureStdout();
    const uint64_t a0 = device_allocs();
    qk::models::train_cifar10(tiny(data, cpu, "cpu", amp));
    const uint64_t a1 = device_allocs();
    qk::models::train_cifar10(tiny(data, dev, "privateuse1:0", amp));
    const uint64_t a2 = device_allocs();
    const std::string out = testing::internal::GetCapturedStdout();
    EXPECT_EQ(a1, a0) << "the CPU run touched the device";
    EXPECT_GT(a2 - a1, 100u) << "the device run did not run on the device\n" << out;
    EXPECT_TRUE(qk::read_file(cpu + "/checkpoints/latest.safetensors") ==
                qk::read_file(dev + "/checkpoints/latest.safetensors"))
        << "the device run's weights differ from the CPU run's\n" << out;
  }
}

}  // namespace
