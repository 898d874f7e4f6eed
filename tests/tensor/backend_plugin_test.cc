// A new device backend plugs in without touching callers: a toy "musa"
// backend (host memory under privateuse1) registers its allocator and two
// kernels; tensors live on it, supported ops run there, the rest fail clearly.
#include <gtest/gtest.h>

#include <cstring>

#include "qk/tensor/backend.h"
#include "qk/tensor/kernel_tables.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"

namespace {
using namespace qk;

class ToyBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::privateuse1; }
  int device_count() const override { return 2; }
  std::string device_name(int i) const override { return "Toy GPU " + std::to_string(i); }
  uint64_t total_memory(int) const override { return 1ull << 30; }
  void* allocate(size_t n, int) override {
    allocated_ += n;
    return std::malloc(n ? n : 1);
  }
  void deallocate(void* p, size_t n, int) override {
    allocated_ -= n;
    std::free(p);
  }
  void copy(void* dst, Device, const void* src, Device, size_t n) override {
    ++copies_;
    std::memcpy(dst, src, n);
  }
  void synchronize(int) override {}
  MemoryStats memory_stats(int) const override { return {allocated_, allocated_, 0}; }
  void reset_peak_memory(int) override {}
  uint64_t allocated_ = 0;
  int copies_ = 0;
};

// The toy device's fill: only contiguous f32, enough for the test.
void toy_fill(const Tensor& dst, double v) {
  ASSERT_TRUE(dst.is_contiguous());
  float* p = static_cast<float*>(dst.raw_data());
  for (int64_t i = 0; i < dst.numel(); ++i) p[i] = static_cast<float>(v);
}
void toy_add(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  ASSERT_EQ(op, BinaryOp::add);
  ASSERT_EQ(a.shape(), b.shape());
  const float* x = static_cast<const float*>(a.raw_data());
  const float* y = static_cast<const float*>(b.raw_data());
  float* o = static_cast<float*>(out.raw_data());
  for (int64_t i = 0; i < out.numel(); ++i) o[i] = x[i] + y[i];
}

TEST(BackendPlugin, NewDeviceWorksThroughTheSameApi) {
  static ToyBackend toy;
  register_backend(&toy);
  rename_privateuse1("musa");
  ops::fill_kernel.set(DeviceType::privateuse1, &toy_fill);
  ops::binary_kernel.set(DeviceType::privateuse1, &toy_add);

  Device musa("musa:1");
  EXPECT_EQ(musa.str(), "musa:1");
  Tensor a = full({4}, 2.0, TensorOptions().device(musa));
  Tensor b = ops::to_device(from_vector<float>({1, 2, 3, 4}, {4}), musa);
  EXPECT_GT(toy.allocated_, 0u);
  EXPECT_EQ(a.device(), musa);
  Tensor c = ops::add(a, b);
  EXPECT_EQ(c.device(), musa);
  EXPECT_EQ(ops::to_device(c, kCPU).to_vector<float>(), (std::vector<float>{3, 4, 5, 6}));
  EXPECT_GE(toy.copies_, 2);
  // Not registered: a clear error naming the kernel and the device.
  try {
    ops::sum(c);
    FAIL();
  } catch (const DeviceError& e) {
    EXPECT_NE(e.message().find("musa:1"), std::string::npos) << e.message();
  }
  // Mixing devices is refused.
  EXPECT_THROW(ops::add(a, ones({4})), DeviceError);
}

}  // namespace
