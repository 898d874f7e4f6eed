// The multi-tensor passes on a GPU against the CPU: more tensors than one
// launch takes, every floating dtype, sizes around the chunk, inf/NaN
// counts. Skipped without a CUDA device (scripts/device-check.sh runs it).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "qk/tensor/cuda.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/optimizer.h"
#include "qk/tensor/ops/view.h"

namespace qk {
namespace {

const Device kCuda0("cuda:0");

class CudaMultiTensor : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  }
};

std::vector<Tensor> gradients() {
  manual_seed(3);
  std::vector<Tensor> g;
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64};
  for (int i = 0; i < 70; ++i) {  // more than one launch's worth of one dtype
    const int64_t n = (i * 7919) % 40000 + (i % 5 == 0 ? 16384 : 1);
    g.push_back(ops::cast(randn({n}), i < 50 ? DType::f32 : dtypes[i % 4]));
  }
  return g;
}

TEST_F(CudaMultiTensor, UnscaleNormAndScaleMatchTheCpu) {
  for (double scale : {1.0, 1.0 / 65536}) {
    SCOPED_TRACE(scale);
    std::vector<Tensor> cpu = gradients(), dev;
    for (const Tensor& t : cpu) dev.push_back(ops::to_device(t, kCuda0));
    const std::vector<double> want = ops::multi_tensor_unscale_norm_(cpu, scale).to_vector<double>();
    const std::vector<double> got =
        ops::to_device(ops::multi_tensor_unscale_norm_(dev, scale), kCPU).to_vector<double>();
    EXPECT_NEAR(got[0], want[0], 1e-5 * want[0]);  // f32 per thread on the GPU, f64 on the CPU
    EXPECT_EQ(got[1], 0.0);
    for (size_t i = 0; i < cpu.size(); ++i)
      EXPECT_EQ(ops::to_device(dev[i], kCPU).to_vector<double>(), cpu[i].to_vector<double>()) << "tensor " << i;
    ops::multi_tensor_scale_(cpu, 0.5);
    ops::multi_tensor_scale_(dev, 0.5);
    for (size_t i = 0; i < cpu.size(); ++i)
      EXPECT_EQ(ops::to_device(dev[i], kCPU).to_vector<double>(), cpu[i].to_vector<double>()) << "tensor " << i;
  }
}

TEST_F(CudaMultiTensor, UnscaleNormCountsInfAndNan) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<Tensor> g{ops::to_device(from_vector<float>({1, inf, 2, nan}, {4}), kCuda0),
                        ops::to_device(ops::cast(from_vector<float>({-inf, 3}, {2}), DType::f16), kCuda0)};
  const std::vector<double> r = ops::to_device(ops::multi_tensor_unscale_norm_(g, 0.5), kCPU).to_vector<double>();
  EXPECT_EQ(r[1], 3.0);
}

}  // namespace
}  // namespace qk
