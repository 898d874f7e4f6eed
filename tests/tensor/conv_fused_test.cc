// ops::conv2d_fused (convolution with a per-channel affine map, residual sum
// and ReLU on its output) against the same computed op by op, on every path:
// oneDNN blocked and plain layouts with post-ops, and the im2col fallback.
#include <gtest/gtest.h>

#include <string>

#include "common/fixtures.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/conv.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/view.h"
#include "cpu/conv.h"
#include "cpu/onednn.h"

namespace qk {
namespace {

using test::all_close;

Tensor reference(const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dParams& p,
                 const Tensor& scale, const Tensor& shift, const Tensor& residual, bool relu) {
  Tensor y = ops::conv2d(x, w, b, p);
  const int64_t o = w.size(0);
  if (scale.defined()) {
    y = ops::add(ops::mul(y, ops::reshape(scale, {1, o, 1, 1})), ops::reshape(shift, {1, o, 1, 1}));
  }
  if (residual.defined()) y = ops::add(y, residual);
  return relu ? ops::unary(UnaryOp::relu, y) : y;
}

struct Case {
  int64_t c, o, hw, k, stride, n = 2;
};

void check_all_epilogues(DType dt, double tol) {
  manual_seed(21);
  // 3 input channels: oneDNN's plain layout (SimpleResNet's stem); 16: blocked;
  // a strided 1x1 (a ResNet shortcut); a batch large enough that oneDNN picks
  // Winograd in f32, where the affine map is folded into the weights.
  for (Case cs : {Case{3, 16, 8, 3, 1}, Case{16, 32, 8, 3, 1}, Case{16, 32, 8, 1, 2},
                  Case{64, 64, 16, 3, 1, 32}}) {
    ops::Conv2dParams p;
    p.padding = {cs.k / 2, cs.k / 2};
    p.stride = {cs.stride, cs.stride};
    Tensor x = randn({cs.n, cs.c, cs.hw, cs.hw}, dt), w = randn({cs.o, cs.c, cs.k, cs.k}, dt);
    const int64_t ho = (cs.hw + 2 * (cs.k / 2) - cs.k) / cs.stride + 1;
    Tensor scale = randn({cs.o}, dt), shift = randn({cs.o}, dt);
    Tensor res = randn({cs.n, cs.o, ho, ho}, dt);
    if (cs.n == 32 && dt == DType::f32 && cpu::onednn::available()) {
      auto g = cpu::conv_geom(x, w, p);
      std::string k = cpu::onednn::kernel_names(g, dt, cpu::onednn::Layout::blocked)[0];
      if (k.find("wino") != std::string::npos) {
        EXPECT_TRUE(cpu::onednn::winograd_chosen(g, dt, true));
      }
    }
    for (bool bias : {false, true}) {
      Tensor b = bias ? randn({cs.o}, dt) : Tensor();
      for (int bits = 0; bits < 8; ++bits) {
        const bool affine = bits & 1, residual = bits & 2, relu = bits & 4;
        SCOPED_TRACE(std::string(dtype_name(dt)) + " c=" + std::to_string(cs.c) + " k=" +
                     std::to_string(cs.k) + " bias=" + std::to_string(bias) +
                     " affine=" + std::to_string(affine) + " residual=" +
                     std::to_string(residual) + " relu=" + std::to_string(relu));
        Tensor sc = affine ? scale : Tensor(), sh = affine ? shift : Tensor();
        Tensor r = residual ? res : Tensor();
        Tensor y = ops::conv2d_fused(x, w, b, p, sc, sh, r, relu);
        Tensor ref = reference(x, w, b, p, sc, sh, r, relu);
        ASSERT_EQ(y.shape(), ref.shape());
        EXPECT_EQ(y.dtype(), dt);
        // Winograd (the n=32 case in f32) rounds differently on each side of
        // the fold: w * scale through the transform against scale * (conv):
        // ~1e-4 on outputs of magnitude ~30 from 576-term sums.
        const double atol = cs.n == 32 && dt == DType::f32 ? 1e-3 : tol;
        EXPECT_TRUE(all_close(y, ref, tol, atol));
        // The residual operand is read, never written.
        if (residual) {
          EXPECT_TRUE(all_close(r, res, 0, 0));
        }
      }
    }
  }
}

TEST(Conv2dFused, MatchesOpByOpF32) { check_all_epilogues(DType::f32, 1e-5); }
// f64 has no oneDNN kernels: the im2col convolution and the epilogue loop.
TEST(Conv2dFused, MatchesOpByOpF64) { check_all_epilogues(DType::f64, 1e-12); }

TEST(Conv2dFused, ReluClampsToZero) {
  // With scale -1 and shift 0, every positive conv output becomes negative
  // and must come out as exactly 0.
  Tensor x = ones({1, 16, 4, 4}), w = ones({16, 16, 1, 1});
  Tensor scale = full({16}, -1.0), shift = zeros({16});
  Tensor y = ops::conv2d_fused(x, w, Tensor(), ops::Conv2dParams{}, scale, shift, Tensor(), true);
  EXPECT_TRUE(all_close(y, zeros({1, 16, 4, 4}), 0, 0));
  Tensor y2 = ops::conv2d_fused(x, w, Tensor(), ops::Conv2dParams{}, scale, shift, Tensor(), false);
  EXPECT_TRUE(all_close(y2, full({1, 16, 4, 4}, -16.0), 0, 0));
}

TEST(Conv2dFused, BadOperandsRaiseNamedErrors) {
  Tensor x = randn({2, 4, 5, 5}), w = randn({8, 4, 3, 3});
  ops::Conv2dParams p;
  Tensor s = randn({8});
  auto msg = [&](const Tensor& sc, const Tensor& sh, const Tensor& r) {
    try {
      ops::conv2d_fused(x, w, Tensor(), p, sc, sh, r, false);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg(s, Tensor(), Tensor()).find("both scale and shift"), std::string::npos);
  EXPECT_NE(msg(randn({7}), s, Tensor()).find("scale must be [8]"), std::string::npos);
  EXPECT_NE(msg(Tensor(), Tensor(), randn({2, 8, 5, 5})).find("residual must be [2, 8, 3, 3]"),
            std::string::npos);
  EXPECT_NE(msg(s, randn({8}, DType::f64), Tensor()).find("shift is f64"), std::string::npos);
}

}  // namespace
}  // namespace qk
