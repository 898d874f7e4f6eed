// Tensor core: geometry, views, copies, dtypes, factories, printing, RNG.
#include <gtest/gtest.h>

#include <cmath>

#include "common/fixtures.h"
#include "qk/autograd/functions.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/backend.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/view.h"
#include "qk/tensor/tensor.h"

namespace {
using namespace qk;

Tensor iota(const Shape& s, DType dt = DType::f32) {
  return ops::reshape(arange(0, static_cast<double>(shape_numel(s)), 1, dt), s);
}

TEST(Tensor, ShapeStridesNumel) {
  Tensor t = zeros({2, 3, 4});
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.device(), kCPU);
  EXPECT_THROW(t.size(3), IndexError);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = iota({2, 3});
  Tensor tt = ops::transpose(t, 0, 1);
  EXPECT_EQ(tt.shape(), (Shape{3, 2}));
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  ops::fill_(ops::select(tt, 0, 1), 9.0);  // writes through to t
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 9, 2, 3, 9, 5}));
}

TEST(Tensor, ViewRequiresCompatibleLayoutReshapeCopies) {
  Tensor t = ops::transpose(iota({2, 3}), 0, 1);
  EXPECT_THROW(ops::view(t, {6}), ValueError);
  Tensor r = ops::reshape(t, {6});
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(ops::view(iota({2, 3}), {3, -1}).shape(), (Shape{3, 2}));
  EXPECT_THROW(ops::view(iota({2, 3}), {4, -1}), ValueError);
}

TEST(Tensor, SliceNarrowExpandPermute) {
  Tensor t = iota({4, 5});
  EXPECT_EQ(ops::slice(t, 1, 1, 5, 2).to_vector<float>(), (std::vector<float>{1, 3, 6, 8, 11, 13, 16, 18}));
  EXPECT_EQ(ops::narrow(t, 0, 3, 1).to_vector<float>(), (std::vector<float>{15, 16, 17, 18, 19}));
  EXPECT_THROW(ops::narrow(t, 0, 3, 2), IndexError);
  Tensor col = iota({3, 1});
  EXPECT_EQ(ops::expand(col, {3, 2}).to_vector<float>(), (std::vector<float>{0, 0, 1, 1, 2, 2}));
  EXPECT_THROW(ops::expand(iota({3}), {2, 4}), ValueError);
  Tensor p = ops::permute(iota({2, 3, 4}), {2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(ops::contiguous(p).to_vector<float>()[1], 4.0f);
  EXPECT_EQ(ops::unsqueeze(iota({3}), 0).shape(), (Shape{1, 3}));
  EXPECT_EQ(ops::squeeze(iota({1, 3}), 0).shape(), (Shape{3}));
  EXPECT_EQ(ops::flatten(iota({2, 3, 4}), 1, -1).shape(), (Shape{2, 12}));
}

TEST(Tensor, CastsRoundTrip) {
  Tensor t = from_vector<float>({-1.5f, 0.0f, 2.25f, 65504.0f}, {4});
  EXPECT_EQ(t.to(DType::f16).to(DType::f32).to_vector<float>(), t.to_vector<float>());
  EXPECT_EQ(t.to(DType::bf16).to(DType::f32).to_vector<float>()[2], 2.25f);
  EXPECT_EQ(t.to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{-1, 0, 2, 65504}));
  EXPECT_EQ(t.to(DType::boolean).to_vector<bool>(), (std::vector<bool>{true, false, true, true}));
}

TEST(DType, HalfRoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and the next half (1 + 2^-10): ties to even -> 1.
  EXPECT_EQ(static_cast<float>(Half(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  EXPECT_EQ(static_cast<float>(Half(1.0f + 3 * std::ldexp(1.0f, -11))), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(70000.0f))));
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(NAN))));
  EXPECT_EQ(static_cast<float>(Half(std::ldexp(1.0f, -24))), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + std::ldexp(1.0f, -8))), 1.0f);  // tie to even
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(NAN))));
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_THROW(parse_dtype("f8"), ValueError);
}

TEST(Device, ParsesAndRejects) {
  EXPECT_EQ(Device("cuda:1").index, 1);
  EXPECT_EQ(Device("cpu").str(), "cpu");
  EXPECT_THROW(Device("tpu"), ValueError);
  EXPECT_THROW(Device("cuda:x"), ValueError);
  EXPECT_THROW(Device("cpu:1"), ValueError);
  // No CUDA backend in a CPU build: a clear DeviceError, not a crash.
  if (!has_backend(DeviceType::cuda)) {
    EXPECT_THROW(zeros({2}, Device("cuda:0")), DeviceError);
  }
}

TEST(Tensor, CopyBroadcastsAndCasts) {
  Tensor dst = zeros({2, 3}, DType::f64);
  dst.copy_(from_vector<int64_t>({1, 2, 3}, {3}));
  EXPECT_EQ(dst.to_vector<double>(), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  EXPECT_THROW(dst.copy_(zeros({4})), ValueError);
}

TEST(Tensor, ItemAndErrors) {
  EXPECT_EQ(full({}, 3.5).item<float>(), 3.5f);
  EXPECT_THROW(zeros({2}).item<float>(), ValueError);
  EXPECT_THROW(Tensor().shape(), ValueError);
  EXPECT_THROW(zeros({2}).data_ptr<double>(), TypeError);
}

TEST(Tensor, PrintsLikePyTorch) {
  EXPECT_EQ(from_vector<float>({1, 2.5f}, {2}).str(), "tensor([1.0000, 2.5000])");
  EXPECT_EQ(arange(3).str(), "tensor([0, 1, 2])");
  EXPECT_EQ(zeros({2, 2}, DType::bf16).str(), "tensor([[0.0000, 0.0000],\n        [0.0000, 0.0000]], dtype=bf16)");
  std::string big = zeros({100, 100}).str();
  EXPECT_NE(big.find("..."), std::string::npos);
  EXPECT_LT(big.size(), 2000u);
}

TEST(Random, SeededAndThreadCountIndependent) {
  manual_seed(123);
  Tensor a = randn({1000});
  set_num_threads(1);
  manual_seed(123);
  Tensor b = randn({1000});
  set_num_threads(2);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  Tensor c = randn({1000});
  EXPECT_NE(a.to_vector<float>(), c.to_vector<float>());
  // Moments of a large sample.
  Tensor big = randn({200000}, DType::f64);
  auto v = big.to_vector<double>();
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= v.size();
  for (double x : v) s += (x - m) * (x - m);
  s = std::sqrt(s / v.size());
  EXPECT_NEAR(m, 0.0, 0.01);
  EXPECT_NEAR(s, 1.0, 0.01);
  Tensor u = rand({10000});
  for (float x : u.to_vector<float>()) ASSERT_TRUE(x >= 0.0f && x < 1.0f);
  Tensor ri = randint(3, 7, {1000});
  for (int64_t x : ri.to_vector<int64_t>()) ASSERT_TRUE(x >= 3 && x < 7);
}

TEST(Random, GeneratorStateResumes) {
  Generator g(99);
  rand({10}, {}, g);
  uint64_t seed = g.seed(), off = g.offset();
  Tensor next = rand({10}, {}, g);
  Generator h;
  h.set_state(seed, off);
  EXPECT_EQ(rand({10}, {}, h).to_vector<float>(), next.to_vector<float>());
  auto perm = randperm(50, g).to_vector<int64_t>();
  std::sort(perm.begin(), perm.end());
  for (int64_t i = 0; i < 50; ++i) ASSERT_EQ(perm[i], i);
}

TEST(Memory, CpuAllocatorTracksPeak) {
  reset_peak_memory(kCPU);
  uint64_t before = memory_stats(kCPU).allocated;
  {
    Tensor big = empty({1 << 20});
    EXPECT_GE(memory_stats(kCPU).allocated, before + (4u << 20));
  }
  EXPECT_EQ(memory_stats(kCPU).allocated, before);
  EXPECT_GE(memory_stats(kCPU).peak_allocated, before + (4u << 20));
}

}  // namespace
