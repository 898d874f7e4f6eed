// The CUDA backend (src/tensor/cuda). Without a GPU (the development
// machines, CI): it is registered, says why no device is usable, and every
// use of a cuda tensor fails with that reason instead of crashing. With one
// (scripts/device-check.sh on the GPU machine): fills and copies of every
// dtype round-trip, the caching allocator reuses blocks and reports memory,
// and running out of memory raises OutOfMemoryError.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/device_compare.h"
#include "qk/base/error.h"
#include "qk/tensor/backend.h"
#include "qk/tensor/cuda.h"
#include "qk/tensor/cuda/stream.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/linalg.h"
#include "qk/tensor/ops/nn.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"
#include "qk/tensor/tensor.h"

namespace qk {
namespace {

const Device kCuda0("cuda:0");

TEST(CudaBackend, IsRegisteredAndSaysWhyNoDeviceIsUsable) {
  ASSERT_TRUE(has_backend(DeviceType::cuda)) << "linking qianka::tensor_cuda registers the backend";
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is here; CudaDevice.* cover it";
  EXPECT_EQ(cuda::device_count(), 0);
  const std::string why = cuda::unavailable_reason();
  EXPECT_NE(why.find("cudaGetDeviceCount"), std::string::npos) << why;
  try {
    Tensor t = zeros({4}, TensorOptions().device(kCuda0));
    ADD_FAILURE() << "a tensor on cuda:0 without a device";
  } catch (const DeviceError& e) {
    EXPECT_NE(e.message().find("cuda:0 is not available: " + why), std::string::npos) << e.message();
  }
  EXPECT_THROW(cuda::synchronize(), DeviceError);
  EXPECT_THROW(cuda::memory_allocated(), DeviceError);
  try {
    ones({4}).pin_memory();
    ADD_FAILURE() << "pinned memory without a device";
  } catch (const DeviceError& e) {
    EXPECT_NE(e.message().find("cannot pin host memory (" + why + ")"), std::string::npos) << e.message();
  }
}

class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  }
};

TEST_F(CudaDevice, FillsAndCopiesOfEveryDtypeRoundTrip) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8,
                  DType::boolean}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor g = full({1000, 3}, 3.0, TensorOptions().dtype(t).device(kCuda0));
    EXPECT_EQ(g.device(), kCuda0);
    Tensor back = ops::to_device(g, kCPU);
    Tensor want = full({1000, 3}, 3.0, TensorOptions().dtype(t));
    EXPECT_EQ(std::memcmp(back.raw_data(), want.raw_data(), want.nbytes()), 0);
    // Host -> device -> device -> host.
    Tensor h = ops::cast(ops::reshape(arange(0, 3000, 1), {1000, 3}), t);
    Tensor d = ops::to_device(h, kCuda0);
    Tensor d2 = ops::clone(d);
    EXPECT_EQ(std::memcmp(ops::to_device(d2, kCPU).raw_data(), h.raw_data(), h.nbytes()), 0);
  }
  Tensor empty_one = zeros({0, 5}, TensorOptions().device(kCuda0));
  EXPECT_EQ(ops::to_device(empty_one, kCPU).numel(), 0);
}

TEST_F(CudaDevice, CachingAllocatorReusesBlocksAndReportsMemory) {
  cuda::synchronize();
  cuda::empty_cache();
  const uint64_t before = cuda::memory_allocated();
  const void* first;
  {
    Tensor a = zeros({1 << 20}, TensorOptions().device(kCuda0));  // 4 MiB
    first = a.raw_data();
    EXPECT_EQ(cuda::memory_allocated(), before + (4u << 20));
    EXPECT_GE(cuda::max_memory_allocated(), before + (4u << 20));
  }
  EXPECT_EQ(cuda::memory_allocated(), before);
  EXPECT_GE(cuda::memory_reserved(), 4u << 20) << "the block stays cached";
  Tensor b = zeros({1 << 20}, TensorOptions().device(kCuda0));
  EXPECT_EQ(b.raw_data(), first) << "the same size class reuses the cached block";
  b = Tensor();
  cuda::empty_cache();
  EXPECT_EQ(cuda::memory_reserved(), cuda::memory_allocated());
}

TEST_F(CudaDevice, OutOfMemorySaysWhatWasAskedAndHeld) {
  const uint64_t total = backend(DeviceType::cuda).total_memory(0);
  try {
    Tensor huge = empty({static_cast<int64_t>(total)}, TensorOptions().dtype(DType::f32).device(kCuda0));
    ADD_FAILURE() << "4 bytes per byte of the device fitted";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(e.message().find("cuda:0"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("tried to allocate"), std::string::npos) << e.message();
  }
  Tensor after = ones({16}, TensorOptions().device(kCuda0));  // the device still works
  EXPECT_EQ(ops::to_device(after, kCPU).to_vector<float>(), std::vector<float>(16, 1.0f));
}

using devtest::max_abs_diff;

TEST_F(CudaDevice, BroadcastStridedAndCastElementwiseMatchTheCpu) {
  Tensor a = randn({5, 1, 7}), b = randn({4, 7});
  Tensor ad = ops::to_device(a, kCuda0), bd = ops::to_device(b, kCuda0);
  EXPECT_LT(max_abs_diff(ops::binary(BinaryOp::mul, a, b), ops::binary(BinaryOp::mul, ad, bd)), 1e-6);
  EXPECT_EQ(max_abs_diff(ops::binary(BinaryOp::gt, a, b), ops::binary(BinaryOp::gt, ad, bd)), 0);
  Tensor t = ops::transpose(ops::reshape(a, {5, 7}), 0, 1);  // strided
  EXPECT_LT(max_abs_diff(ops::unary(UnaryOp::gelu, t), ops::unary(UnaryOp::gelu, ops::transpose(ops::reshape(ad, {5, 7}), 0, 1))), 1e-6);
  EXPECT_EQ(max_abs_diff(ops::cast(t, DType::bf16), ops::cast(ops::transpose(ops::reshape(ad, {5, 7}), 0, 1), DType::bf16)), 0)
      << "round to nearest even, as the CPU";
}

TEST_F(CudaDevice, MatrixProductsMatchTheCpu) {
  Tensor a = randn({33, 17}), b = randn({17, 9}), w = randn({9, 17}), bias = randn({9});
  auto dev = [](const Tensor& t) { return ops::to_device(t, kCuda0); };
  EXPECT_LT(max_abs_diff(ops::mm(a, b), ops::mm(dev(a), dev(b))), 1e-4);
  EXPECT_LT(max_abs_diff(ops::mm(ops::transpose(b, 0, 1), ops::transpose(a, 0, 1)),
                     ops::mm(ops::transpose(dev(b), 0, 1), ops::transpose(dev(a), 0, 1))), 1e-4) << "transposed views";
  EXPECT_LT(max_abs_diff(ops::linear(a, w, bias), ops::linear(dev(a), dev(w), dev(bias))), 1e-4);
  Tensor x = randn({3, 8, 5}), y = randn({3, 5, 6});
  EXPECT_LT(max_abs_diff(ops::bmm(x, y), ops::bmm(dev(x), dev(y))), 1e-4);
  for (DType t : {DType::bf16, DType::f16, DType::f64}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor at = ops::cast(a, t), bt = ops::cast(b, t);
    EXPECT_LT(max_abs_diff(ops::mm(at, bt), ops::mm(dev(at), dev(bt))), t == DType::f64 ? 1e-12 : 0.1);
  }
}

TEST_F(CudaDevice, ReductionsAndSoftmaxMatchTheCpu) {
  Tensor a = randn({6, 5, 7});
  Tensor d = ops::to_device(a, kCuda0);
  EXPECT_LT(max_abs_diff(ops::sum(a, {0, 2}, false), ops::sum(d, {0, 2}, false)), 1e-5);
  EXPECT_LT(max_abs_diff(ops::mean(a, {1}, true), ops::mean(d, {1}, true)), 1e-6);
  EXPECT_EQ(max_abs_diff(ops::amax(a, {2}, false), ops::amax(d, {2}, false)), 0);
  EXPECT_LT(max_abs_diff(ops::softmax(a, 1), ops::softmax(d, 1)), 1e-6);
  EXPECT_LT(max_abs_diff(ops::log_softmax(a, -1), ops::log_softmax(d, -1)), 1e-5);
}

TEST_F(CudaDevice, WorkQueuesOnTheCurrentStreamAndEventsOrderIt) {
  EXPECT_EQ(cuda::current_stream().handle(), 0u) << "the legacy default stream until one is set";
  cuda::Stream side = cuda::Stream::create();
  EXPECT_NE(side.handle(), 0u);
  Tensor a = randn({256, 256});
  Tensor ad = ops::to_device(a, kCuda0);
  Tensor y;
  cuda::Event start, stop;
  {
    cuda::StreamGuard g(side);
    EXPECT_EQ(cuda::current_stream(), side);
    start.record(side);
    y = ops::mm(ad, ad);
    stop.record(side);
  }
  EXPECT_EQ(cuda::current_stream().handle(), 0u) << "the guard restored the default";
  cuda::current_stream().wait(stop);  // the copy below waits for the product
  EXPECT_LT(max_abs_diff(ops::mm(a, a), y), 1e-3);
  stop.synchronize();
  EXPECT_TRUE(stop.query());
  EXPECT_GE(start.elapsed_ms(stop), 0.0f);
  side.synchronize();
  EXPECT_TRUE(side.query());
}

// record_stream: a block the side stream read is not handed to the default
// stream's next allocation while the side stream's work on it is queued.
TEST_F(CudaDevice, ABlockASideStreamUsesWaitsForIt) {
  cuda::Stream side = cuda::Stream::create();
  Tensor x = randn({1 << 20}).to(kCuda0);
  const void* block = x.raw_data();
  Tensor y;
  {
    cuda::StreamGuard g(side);
    y = ops::mm(ops::reshape(x, {1024, 1024}), ops::reshape(x, {1024, 1024}));  // long enough to be queued
    cuda::record_stream(x, side);
  }
  x = Tensor();  // freed while the product may still read it
  Tensor z = empty({1 << 20}, TensorOptions().device(kCuda0));
  if (!side.query()) {
    EXPECT_NE(z.raw_data(), block) << "the side stream's block was reused under it";
  }
  side.synchronize();
  EXPECT_THROW(cuda::record_stream(randn({4}), side), DeviceError) << "a host tensor";
}

TEST_F(CudaDevice, DeviceIndicesBeyondTheMachineAreRefused) {
  Device beyond(DeviceType::cuda, cuda::device_count());
  EXPECT_THROW(zeros({4}, TensorOptions().device(beyond)), DeviceError);
}

// Pinned host memory: a non-blocking copy up and back lands the same
// values once the device is synchronized, and the result of a non-blocking
// copy to the host is pinned; pinning memory stays exact for every dtype.
TEST_F(CudaDevice, PinnedMemoryAndNonBlockingCopiesRoundTrip) {
  Tensor x = randn({1 << 20});
  Tensor p = x.pin_memory();
  EXPECT_TRUE(p.is_pinned());
  Tensor d = p.to(kCuda0, true);
  Tensor back = d.to(kCPU, true);
  EXPECT_TRUE(back.is_pinned());
  cuda::synchronize();
  EXPECT_EQ(back.to_vector<float>(), x.to_vector<float>());
  // A blocking copy from pinned memory must not return before the DMA read it.
  Tensor q = full({1 << 20}, 3.0).pin_memory();
  Tensor dq = q.to(kCuda0);
  ops::fill_(q, -1.0);
  EXPECT_EQ(ops::to_device(dq, kCPU).to_vector<float>(), std::vector<float>(1 << 20, 3.0f));
  for (DType t : {DType::f64, DType::bf16, DType::i64, DType::u8}) {
    Tensor v = ops::cast(randn({37}), t);
    EXPECT_EQ(max_abs_diff(v.pin_memory().to(kCuda0, true).to(kCPU), v), 0.0) << dtype_name(t);
  }
}

}  // namespace
}  // namespace qk
