// conv2d forward and backward: PyTorch parity (tests/fixtures/gen_conv.py)
// for both algorithms (im2col+GEMM and oneDNN) in f64/f32, reduced floats,
// hand-computed values, layouts, threads, and bad input.
#include <gtest/gtest.h>

#include <string>

#include "common/fixtures.h"
#include "common/reference_tool.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/conv.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/view.h"
#include "cpu/conv.h"
#include "cpu/onednn.h"

namespace qk {
namespace {

using test::all_close;

const char* kCases[] = {"conv2d_basic",     "conv2d_stride2",   "conv2d_dilation",
                        "conv2d_groups",    "conv2d_depthwise", "conv2d_pointwise",
                        "conv2d_rect_kernel"};

ops::Conv2dParams params_of(const test::Fixture& fx) {
  ops::Conv2dParams p;
  p.stride = {static_cast<int64_t>(fx.scalar("stride_h")), static_cast<int64_t>(fx.scalar("stride_w"))};
  p.padding = {static_cast<int64_t>(fx.scalar("pad_h")), static_cast<int64_t>(fx.scalar("pad_w"))};
  p.dilation = {static_cast<int64_t>(fx.scalar("dil_h")), static_cast<int64_t>(fx.scalar("dil_w"))};
  p.groups = static_cast<int64_t>(fx.scalar("groups"));
  return p;
}

enum class Algo { front, im2col, onednn };

Tensor run_forward(Algo algo, const Tensor& x, const Tensor& w, const Tensor& b,
                   const ops::Conv2dParams& p) {
  switch (algo) {
    case Algo::front: return ops::conv2d(x, w, b, p);
    case Algo::im2col: return cpu::conv2d_forward_im2col(x, w, b, p);
    case Algo::onednn: return cpu::onednn::conv2d_forward(x, w, b, cpu::conv_geom(x, w, p));
  }
  return Tensor();
}

std::tuple<Tensor, Tensor, Tensor> run_backward(Algo algo, const Tensor& dy, const Tensor& x,
                                                const Tensor& w, const ops::Conv2dParams& p) {
  switch (algo) {
    case Algo::front: return ops::conv2d_backward(dy, x, w, p, true, true, true);
    case Algo::im2col: return cpu::conv2d_backward_im2col(dy, x, w, p, true, true, true);
    case Algo::onednn:
      return cpu::onednn::conv2d_backward(dy, x, w, cpu::conv_geom(x, w, p), true, true, true);
  }
  return {};
}

// Forward and backward of every fixture in `dt` through `algo`.
void check_parity(Algo algo, DType dt, double rtol, double atol) {
  for (const char* name : kCases) {
    SCOPED_TRACE(std::string(name) + " " + dtype_name(dt));
    auto fx = test::load_fixture(std::string(name) + ".json");
    auto p = params_of(fx);
    Tensor x = fx.tensor("x").to(dt), w = fx.tensor("w").to(dt), dy = fx.tensor("dy").to(dt);
    Tensor b = fx.has("b") ? fx.tensor("b").to(dt) : Tensor();
    Tensor y = run_forward(algo, x, w, b, p);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_TRUE(all_close(y.to(DType::f64), fx.tensor("y").to(DType::f64), rtol, atol));
    auto [dx, dw, db] = run_backward(algo, dy, x, w, p);
    EXPECT_TRUE(all_close(dx.to(DType::f64), fx.tensor("dx").to(DType::f64), rtol, atol));
    EXPECT_TRUE(all_close(dw.to(DType::f64), fx.tensor("dw").to(DType::f64), rtol, atol));
    if (fx.has("db")) {
      EXPECT_TRUE(all_close(db.to(DType::f64), fx.tensor("db").to(DType::f64), rtol, atol));
    }
  }
}

TEST(Conv2d, TorchParityF64) { check_parity(Algo::front, DType::f64, 1e-10, 1e-10); }
TEST(Conv2d, TorchParityF32Default) { check_parity(Algo::front, DType::f32, 1e-4, 1e-4); }
TEST(Conv2d, TorchParityF32Im2col) { check_parity(Algo::im2col, DType::f32, 1e-4, 1e-4); }

TEST(Conv2d, TorchParityF32OneDnn) {
  if (!cpu::onednn::available()) QK_MISSING_REFERENCE_TOOL("built without oneDNN (Debian: libdnnl-dev)");
  check_parity(Algo::onednn, DType::f32, 1e-4, 1e-4);
}

TEST(Conv2d, TorchParityReducedFloats) {
  // Inputs rounded to bf16/f16 (relative error 2^-8 / 2^-11 each) over sums
  // of up to 27 terms: tolerances scale with that.
  check_parity(Algo::front, DType::bf16, 5e-2, 1.5e-1);
  check_parity(Algo::front, DType::f16, 1e-2, 2e-2);
}

TEST(Conv2d, HandComputed) {
  // x = 1..16 on a 4x4 plane, w = [[1,0],[0,-1]], stride 2: x[i,j] - x[i+1,j+1] = -5.
  std::vector<float> xs(16);
  for (int i = 0; i < 16; ++i) xs[i] = static_cast<float>(i + 1);
  Tensor x = from_vector<float>(xs, {1, 1, 4, 4});
  Tensor w = from_vector<float>({1, 0, 0, -1}, {1, 1, 2, 2});
  Tensor b = from_vector<float>({0.5f}, {1});
  ops::Conv2dParams p;
  p.stride = {2, 2};
  EXPECT_TRUE(all_close(ops::conv2d(x, w, b, p), full({1, 1, 2, 2}, -4.5), 0, 0));
  // Padding 1, stride 1: the corner output sees only x[0,0] * w[1,1] = -1.
  p.stride = {1, 1};
  p.padding = {1, 1};
  Tensor y = ops::conv2d(x, w, Tensor(), p);
  ASSERT_EQ(y.shape(), (Shape{1, 1, 5, 5}));
  EXPECT_EQ(y.to_vector<float>()[0], -1.0f);
  EXPECT_EQ(y.to_vector<float>()[24], 16.0f);  // bottom-right: x[3,3] * w[0,0]
}

TEST(Conv2d, AlgorithmsAgreeOnSimpleCnnShapes) {
  if (!cpu::onednn::available()) QK_MISSING_REFERENCE_TOOL("built without oneDNN (Debian: libdnnl-dev)");
  manual_seed(11);
  ops::Conv2dParams p;
  p.padding = {1, 1};
  for (auto [c, o, hw] : {std::tuple{3, 32, 16}, {32, 64, 8}, {64, 128, 4}}) {
    Tensor x = randn({4, c, hw, hw}), w = randn({o, c, 3, 3}), b = randn({o});
    Tensor dy = randn({4, o, hw, hw});
    auto g = cpu::conv_geom(x, w, p);
    // The plain layout is a benchmark alternative: check it on one shape only
    // (each new primitive costs a JIT compile).
    auto layouts = c == 32 ? std::vector{cpu::onednn::Layout::blocked, cpu::onednn::Layout::plain}
                           : std::vector{cpu::onednn::Layout::blocked};
    for (auto layout : layouts) {
      SCOPED_TRACE(std::to_string(c) + "->" + std::to_string(o));
      Tensor y1 = cpu::conv2d_forward_im2col(x, w, b, p);
      Tensor y2 = cpu::onednn::conv2d_forward(x, w, b, g, layout);
      EXPECT_TRUE(all_close(y2, y1, 1e-4, 1e-3));
      auto [dx1, dw1, db1] = cpu::conv2d_backward_im2col(dy, x, w, p, true, true, true);
      auto [dx2, dw2, db2] = cpu::onednn::conv2d_backward(dy, x, w, g, true, true, true, layout);
      EXPECT_TRUE(all_close(dx2, dx1, 1e-4, 1e-3));
      EXPECT_TRUE(all_close(dw2, dw1, 1e-4, 1e-2));
      EXPECT_TRUE(all_close(db2, db1, 1e-5, 1e-3));
    }
  }
}

// Note [Winograd]: a ResNet 3x3 stride-1 layer in f32 asks oneDNN for
// convolution_auto, which runs its Winograd kernels where the CPU has them
// and direct ones elsewhere (jit:avx512_core on Zen 5): which one is the
// CPU's business. Whatever each of the three primitives picked agrees with
// the im2col reference, forward and backward, within Winograd's rounding.
TEST(Conv2d, WinogradAgreesWithIm2col) {
  if (!cpu::onednn::available()) QK_MISSING_REFERENCE_TOOL("built without oneDNN (Debian: libdnnl-dev)");
  manual_seed(13);
  ops::Conv2dParams p;
  p.padding = {1, 1};
  Tensor x = randn({32, 64, 16, 16}), w = ops::mul(randn({64, 64, 3, 3}), scalar_tensor(0.05));
  Tensor dy = randn({32, 64, 16, 16});
  auto g = cpu::conv_geom(x, w, p);
  // Our side of the choice: f32 3x3 stride 1 may run Winograd, bf16 never.
  EXPECT_TRUE(cpu::onednn::winograd_applies(g, DType::f32));
  EXPECT_FALSE(cpu::onednn::winograd_applies(g, DType::bf16));
  auto names = cpu::onednn::kernel_names(g, DType::f32, cpu::onednn::Layout::blocked);
  SCOPED_TRACE("oneDNN picked " + names[0] + " forward, " + names[1] + " backward data, " + names[2] +
               " backward weights");
  for (const std::string& n : names) EXPECT_FALSE(n.empty());
  Tensor y1 = cpu::conv2d_forward_im2col(x, w, Tensor(), p);
  Tensor y2 = cpu::onednn::conv2d_forward(x, w, Tensor(), g, cpu::onednn::Layout::blocked);
  EXPECT_TRUE(all_close(y2, y1, 1e-4, 1e-4));
  auto [dx1, dw1, db1] = cpu::conv2d_backward_im2col(dy, x, w, p, true, true, false);
  auto [dx2, dw2, db2] =
      cpu::onednn::conv2d_backward(dy, x, w, g, true, true, false, cpu::onednn::Layout::blocked);
  EXPECT_TRUE(all_close(dx2, dx1, 1e-4, 1e-4));
  EXPECT_TRUE(all_close(dw2, dw1, 1e-4, 1e-2));
}

TEST(Conv2d, ThreadCountDoesNotChangeResults) {
  manual_seed(12);
  ops::Conv2dParams p;
  p.padding = {1, 1};
  Tensor x = randn({5, 6, 7, 7}, DType::f64), w = randn({4, 6, 3, 3}, DType::f64);
  Tensor dy = randn({5, 4, 7, 7}, DType::f64);
  set_num_threads(1);
  Tensor y1 = ops::conv2d(x, w, Tensor(), p);
  auto [dx1, dw1, db1] = ops::conv2d_backward(dy, x, w, p, true, true, true);
  set_num_threads(2);
  Tensor y2 = ops::conv2d(x, w, Tensor(), p);
  auto [dx2, dw2, db2] = ops::conv2d_backward(dy, x, w, p, true, true, true);
  EXPECT_TRUE(all_close(y2, y1, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(dx2, dx1, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(dw2, dw1, 1e-12, 1e-12));  // per-thread partial sums, reduced
  EXPECT_TRUE(all_close(db2, db1, 1e-12, 1e-12));
}

TEST(Conv2d, NonContiguousInputs) {
  manual_seed(13);
  Tensor xt = randn({2, 8, 8, 3});  // NHWC storage
  Tensor x = xt.permute({0, 3, 1, 2});
  ASSERT_FALSE(x.is_contiguous());
  Tensor w = randn({4, 3, 3, 3});
  ops::Conv2dParams p;
  EXPECT_TRUE(all_close(ops::conv2d(x, w, Tensor(), p), ops::conv2d(x.contiguous(), w, Tensor(), p),
                        1e-6, 1e-6));
}

TEST(Conv2d, OnlyRequestedGradients) {
  manual_seed(14);
  Tensor x = randn({1, 2, 5, 5}), w = randn({3, 2, 3, 3}), dy = randn({1, 3, 3, 3});
  auto [dx, dw, db] = ops::conv2d_backward(dy, x, w, {}, false, true, false);
  EXPECT_FALSE(dx.defined());
  EXPECT_TRUE(dw.defined());
  EXPECT_FALSE(db.defined());
}

template <typename E, typename F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
  }
}

TEST(Conv2d, BadInputsRaiseNamedErrors) {
  ops::Conv2dParams p;
  expect_error<ValueError>([&] { ops::conv2d(zeros({1, 3, 8, 8}), zeros({4, 2, 3, 3}), Tensor(), p); },
                           {"conv2d", "[4, 2, 3, 3]", "[1, 3, 8, 8]"});
  expect_error<ValueError>([&] { ops::conv2d(zeros({3, 8, 8}), zeros({4, 3, 3, 3}), Tensor(), p); },
                           {"conv2d", "[3, 8, 8]", "unsqueeze"});
  expect_error<TypeError>(
      [&] { ops::conv2d(zeros({1, 3, 8, 8}), zeros({4, 3, 3, 3}, DType::f64), Tensor(), p); },
      {"conv2d", "f64", "f32"});
  expect_error<TypeError>(
      [&] { ops::conv2d(zeros({1, 3, 8, 8}, DType::i32), zeros({4, 3, 3, 3}, DType::i32), Tensor(), p); },
      {"conv2d", "i32"});
  expect_error<ValueError>([&] { ops::conv2d(zeros({1, 3, 2, 2}), zeros({4, 3, 3, 3}), Tensor(), p); },
                           {"conv2d", "does not fit", "[1, 3, 2, 2]"});
  expect_error<ValueError>([&] { ops::conv2d(zeros({1, 3, 8, 8}), zeros({4, 3, 3, 3}), zeros({5}), p); },
                           {"conv2d", "bias", "[5]"});
  ops::Conv2dParams g2;
  g2.groups = 2;
  expect_error<ValueError>([&] { ops::conv2d(zeros({1, 3, 8, 8}), zeros({4, 1, 3, 3}), Tensor(), g2); },
                           {"conv2d", "groups = 2"});
  ops::Conv2dParams s0;
  s0.stride = {0, 1};
  expect_error<ValueError>([&] { ops::conv2d(zeros({1, 3, 8, 8}), zeros({4, 3, 3, 3}), Tensor(), s0); },
                           {"conv2d", "stride [0, 1]"});
  expect_error<ValueError>(
      [&] {
        ops::conv2d_backward(zeros({1, 4, 5, 5}), zeros({1, 3, 8, 8}), zeros({4, 3, 3, 3}), p, true,
                             true, true);
      },
      {"conv2d_backward", "[1, 4, 6, 6]", "[1, 4, 5, 5]"});
}

}  // namespace
}  // namespace qk
