// Channels last (qk/tensor/ops/memory_format.h): the format's predicates and
// copies; elementwise results, reductions, conv2d (every CPU algorithm),
// batch norm and pooling on channels-last inputs give the values of the
// contiguous path, and the activations stay channels last.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "common/fixtures.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/conv.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/memory_format.h"
#include "qk/tensor/ops/norm.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"
#include "cpu/loops.h"
#include "cpu/onednn.h"

namespace qk {
namespace {

using ops::MemoryFormat;
using test::all_close;

Tensor cl(const Tensor& t) { return ops::contiguous(t, MemoryFormat::channels_last); }

// QK_CONV_ALGO for one scope (read at each call, not cached).
struct ConvAlgoEnv {
  explicit ConvAlgoEnv(const char* v) { setenv("QK_CONV_ALGO", v, 1); }
  ~ConvAlgoEnv() { unsetenv("QK_CONV_ALGO"); }
};

TEST(ChannelsLast, TheFormatIsTheNhwcStorageOfAnNchwTensor) {
  const Tensor x = randn({2, 3, 4, 5});
  EXPECT_FALSE(ops::is_channels_last(x));
  const Tensor y = cl(x);
  EXPECT_TRUE(ops::is_channels_last(y));
  EXPECT_EQ(y.shape(), x.shape());
  EXPECT_EQ(y.strides(), (Shape{60, 1, 15, 3}));
  EXPECT_EQ(ops::suggest_memory_format(y), MemoryFormat::channels_last);
  EXPECT_TRUE(all_close(y, x, 0, 0));
  // Its storage in order is x permuted to [N, H, W, C].
  EXPECT_TRUE(all_close(ops::permute(y, {0, 2, 3, 1}).contiguous().view({-1}),
                        ops::permute(x, {0, 2, 3, 1}).contiguous().view({-1}), 0, 0));
  EXPECT_TRUE(ops::permute(y, {0, 2, 3, 1}).is_contiguous());
  // Already channels last: the same tensor; back to contiguous: a copy.
  EXPECT_EQ(cl(y).raw_data(), y.raw_data());
  const Tensor back = ops::contiguous(y, MemoryFormat::contiguous);
  EXPECT_TRUE(back.is_contiguous());
  EXPECT_TRUE(all_close(back, x, 0, 0));
  const Tensor e = ops::empty({2, 3, 4, 5}, TensorOptions(DType::f32), MemoryFormat::channels_last);
  EXPECT_TRUE(ops::is_channels_last(e));
}

TEST(ChannelsLast, OneChannelOrOnePixelIsPlainContiguous) {
  for (const Shape& s : {Shape{2, 1, 4, 5}, Shape{2, 8, 1, 1}}) {
    const Tensor x = randn(s);
    const Tensor y = cl(x);
    EXPECT_FALSE(ops::is_channels_last(y)) << shape_str(s);
    EXPECT_TRUE(y.is_contiguous()) << shape_str(s);
    EXPECT_EQ(y.raw_data(), x.raw_data()) << "the same memory: no copy";
  }
  // A channel slice of a channels-last tensor is neither format.
  const Tensor sliced = ops::slice(cl(randn({2, 6, 4, 4})), 1, 0, 3);
  EXPECT_FALSE(ops::is_channels_last(sliced));
  EXPECT_TRUE(ops::is_channels_last(cl(sliced)));
}

TEST(ChannelsLast, OnlyFourDimensionalTensorsHaveIt) {
  try {
    (void)cl(randn({2, 3, 4}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("channels_last needs a 4-D tensor [N, C, H, W], got [2, 3, 4]"), std::string::npos)
        << e.message();
  }
}

TEST(ChannelsLast, ElementwiseResultsKeepTheFormat) {
  const Tensor x = randn({2, 4, 3, 5}), z = randn({2, 4, 3, 5});
  const Tensor xc = cl(x), bias = randn({1, 4, 1, 1});
  auto check = [](const char* what, const Tensor& got, const Tensor& want) {
    EXPECT_TRUE(ops::is_channels_last(got)) << what;
    EXPECT_TRUE(all_close(got, want, 0, 0)) << what;
  };
  check("relu", ops::unary(UnaryOp::relu, xc), ops::unary(UnaryOp::relu, x));
  check("x + bias", ops::add(xc, bias), ops::add(x, bias));
  check("bias * x", ops::mul(bias, xc), ops::mul(bias, x));
  check("x - z (z contiguous)", ops::sub(xc, z), ops::sub(x, z));
  check("z - x (x channels last)", ops::sub(z, xc), ops::sub(z, x));
  check("x * 2", ops::binary_scalar(BinaryOp::mul, xc, 2.0), ops::binary_scalar(BinaryOp::mul, x, 2.0));
  check("clamp", ops::clamp(xc, -0.5, 0.5), ops::clamp(x, -0.5, 0.5));
  check("relu backward", ops::unary_backward(UnaryOp::relu, cl(z), xc, Tensor()),
        ops::unary_backward(UnaryOp::relu, z, x, Tensor()));
  check("where", ops::where(ops::binary(BinaryOp::gt, xc, z), xc, z), ops::where(ops::binary(BinaryOp::gt, x, z), x, z));
  check("clone", ops::clone(xc), x);
  check("cast", ops::cast(xc, DType::f64), ops::cast(x, DType::f64));
  // Contiguous operands of another shape than the result: contiguous.
  EXPECT_TRUE(ops::add(x, bias).is_contiguous());
}

// The loop walks a channels-last result in its memory order: equal formats
// merge into one row (not a stride-C innermost loop).
TEST(ChannelsLast, ElementwiseLoopsWalkTheStorageInOrder) {
  const Tensor a = cl(randn({2, 4, 3, 5}));
  const Tensor o = ops::empty({2, 4, 3, 5}, TensorOptions(DType::f32), MemoryFormat::channels_last);
  const auto L = cpu::make_layout<2>(o.shape(), {o, a});
  EXPECT_EQ(L.shape, (Shape{120}));
  EXPECT_EQ(L.strides[0], (Shape{1}));
  // With a per-channel operand: [N*H*W, C] rows.
  const Tensor bias = randn({1, 4, 1, 1});
  const auto B = cpu::make_layout<3>(o.shape(), {o, a, bias});
  EXPECT_EQ(B.shape, (Shape{30, 4}));
  EXPECT_EQ(B.strides[2], (Shape{0, 1}));
}

TEST(ChannelsLast, ReductionsGiveTheContiguousValues) {
  const Tensor x = randn({3, 5, 4, 6}, DType::f64), xc = cl(x);
  const std::vector<Shape> dims = {{0, 2, 3}, {1}, {2, 3}, {0}, {}, {1, 3}};
  for (const Shape& d : dims) {
    for (bool keep : {false, true}) {
      const Tensor want = ops::sum(x, d, keep), got = ops::sum(xc, d, keep);
      EXPECT_EQ(got.shape(), want.shape()) << shape_str(d) << " keepdim " << keep;
      EXPECT_TRUE(all_close(got, want, 1e-12, 1e-12)) << shape_str(d) << " keepdim " << keep;
    }
  }
  EXPECT_TRUE(all_close(ops::mean(xc, {0, 2, 3}), ops::mean(x, {0, 2, 3}), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(ops::amax(xc, {0, 2, 3}), ops::amax(x, {0, 2, 3}), 0, 0));
}

struct ConvCase {
  Shape x, w;
  ops::Conv2dParams p;
  bool bias;
};

const ConvCase kConvCases[] = {
    {{2, 8, 9, 9}, {16, 8, 3, 3}, {.padding = {1, 1}}, true},
    {{2, 6, 10, 8}, {4, 6, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}, false},
    {{1, 8, 7, 7}, {8, 4, 3, 3}, {.padding = {1, 1}, .groups = 2}, true},
    {{2, 16, 5, 5}, {8, 16, 1, 1}, {}, false},
    {{2, 3, 12, 12}, {16, 3, 3, 3}, {.padding = {1, 1}}, true},  // few channels: oneDNN's plain kernels
    {{1, 4, 11, 11}, {6, 4, 3, 3}, {.dilation = {2, 2}}, true},
};

std::string conv_name(const ConvCase& c) {
  return detail::str_cat("x", shape_str(c.x), " w", shape_str(c.w), " stride ", c.p.stride[0], " groups ", c.p.groups);
}

// Forward and backward of a channels-last x against the contiguous one, for
// one QK_CONV_ALGO; the results and dx channels last.
void expect_conv_equal(const char* algo, DType dt, double tol) {
  ConvAlgoEnv env(algo);
  manual_seed(3);
  for (const ConvCase& c : kConvCases) {
    const Tensor x = ops::cast(randn(c.x), dt), w = ops::cast(randn(c.w), dt);
    const Tensor b = c.bias ? ops::cast(randn({c.w[0]}), dt) : Tensor();
    const Tensor y = ops::conv2d(x, w, b, c.p);
    const Tensor yc = ops::conv2d(cl(x), w, b, c.p);
    const std::string what = detail::str_cat(algo, " ", dtype_name(dt), " ", conv_name(c));
    EXPECT_EQ(ops::is_channels_last(yc), y.size(2) * y.size(3) > 1) << what;
    EXPECT_TRUE(all_close(yc, y, tol, tol)) << what;
    const Tensor dy = ops::cast(randn(y.shape()), dt);
    auto [dx, dw, db] = ops::conv2d_backward(dy, x, w, c.p, true, true, c.bias);
    auto [dxc, dwc, dbc] = ops::conv2d_backward(dy, cl(x), w, c.p, true, true, c.bias);
    EXPECT_TRUE(ops::is_channels_last(dxc)) << what;
    EXPECT_TRUE(dwc.is_contiguous()) << what << ": the weight's gradient keeps the weight's layout";
    EXPECT_TRUE(all_close(dxc, dx, tol, tol)) << what;
    EXPECT_TRUE(all_close(dwc, dw, tol, tol)) << what;
    if (c.bias) {
      EXPECT_TRUE(all_close(dbc, db, tol, tol)) << what;
    }
    // grad_out channels last as well (as the ops after a channels-last conv give it).
    auto [dx2, dw2, db2] = ops::conv2d_backward(cl(dy), cl(x), w, c.p, true, true, false);
    EXPECT_TRUE(all_close(dx2, dx, tol, tol)) << what;
    EXPECT_TRUE(all_close(dw2, dw, tol, tol)) << what;
  }
}

TEST(ChannelsLast, Conv2dOfEveryCpuAlgorithmGivesTheContiguousValues) {
  expect_conv_equal("im2col", DType::f64, 1e-12);
  expect_conv_equal("im2col", DType::f32, 1e-4);
  if (!cpu::onednn::available()) GTEST_SKIP() << "no oneDNN in this build";
  expect_conv_equal("onednn", DType::f32, 1e-4);
  expect_conv_equal("onednn_plain", DType::f32, 1e-4);
  expect_conv_equal("auto", DType::f32, 1e-4);
}

TEST(ChannelsLast, Bf16Conv2dGivesTheContiguousValues) {
  // oneDNN's bf16 kernels where this CPU has them, else f32 inside.
  expect_conv_equal("auto", DType::bf16, 2e-2);
}

TEST(ChannelsLast, FusedConvolutionGivesTheContiguousValues) {
  manual_seed(4);
  const Tensor x = randn({2, 8, 6, 6}), w = randn({8, 8, 3, 3}), b = randn({8});
  const Tensor scale = rand({8}), shift = randn({8}), res = randn({2, 8, 6, 6});
  const ops::Conv2dParams p{.padding = {1, 1}};
  const Tensor want = ops::conv2d_fused(x, w, b, p, scale, shift, res, true);
  const Tensor got = ops::conv2d_fused(cl(x), w, b, p, scale, shift, cl(res), true);
  EXPECT_TRUE(ops::is_channels_last(got));
  EXPECT_TRUE(all_close(got, want, 1e-4, 1e-4));
}

void expect_batch_norm_equal(DType dt, double tol) {
  manual_seed(5);
  const Shape s{4, 6, 5, 3};
  const Tensor x = ops::add(ops::cast(randn(s), dt), ops::cast(full({1, 6, 1, 1}, 3.0), dt));
  const Tensor w = rand({6}), b = randn({6});
  for (bool training : {true, false}) {
    const std::string what = detail::str_cat(dtype_name(dt), training ? " training" : " eval");
    Tensor rm = randn({6}), rv = ops::add(rand({6}), full({6}, 0.5));
    Tensor rm2 = ops::clone(rm), rv2 = ops::clone(rv);
    const auto want = ops::batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5);
    const auto got = ops::batch_norm(cl(x), w, b, rm2, rv2, training, 0.1, 1e-5);
    EXPECT_TRUE(ops::is_channels_last(got.out)) << what;
    EXPECT_TRUE(all_close(got.out, want.out, tol, tol)) << what;
    EXPECT_TRUE(all_close(got.save_mean, want.save_mean, 1e-5, 1e-5)) << what;
    EXPECT_TRUE(all_close(got.save_invstd, want.save_invstd, 1e-4, 1e-4)) << what;
    EXPECT_EQ(got.save_mean.dtype(), want.save_mean.dtype()) << what;
    EXPECT_TRUE(all_close(rm2, rm, 1e-5, 1e-5)) << what << ": running mean";
    EXPECT_TRUE(all_close(rv2, rv, 1e-5, 1e-5)) << what << ": running var";
    const Tensor dy = ops::cast(randn(s), dt);
    auto [dx, dw, db] = ops::batch_norm_backward(dy, x, w, want.save_mean, want.save_invstd, training);
    auto [dxc, dwc, dbc] = ops::batch_norm_backward(cl(dy), cl(x), w, want.save_mean, want.save_invstd, training);
    EXPECT_TRUE(ops::is_channels_last(dxc)) << what;
    EXPECT_TRUE(all_close(dxc, dx, tol, tol)) << what;
    EXPECT_TRUE(all_close(dwc, dw, tol * 10, tol * 10)) << what;
    EXPECT_TRUE(all_close(dbc, db, tol * 10, tol * 10)) << what;
    EXPECT_EQ(dwc.dtype(), dw.dtype()) << what;
  }
  // No affine parameters.
  const auto want = ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
  const auto got = ops::batch_norm(cl(x), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
  EXPECT_TRUE(all_close(got.out, want.out, tol, tol));
}

TEST(ChannelsLast, BatchNormGivesTheContiguousValues) {
  expect_batch_norm_equal(DType::f64, 1e-10);
  expect_batch_norm_equal(DType::f32, 1e-4);
  expect_batch_norm_equal(DType::bf16, 3e-2);
}

// Equal values, NaN equal to NaN.
::testing::AssertionResult same(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return ::testing::AssertionFailure() << shape_str(a.shape()) << " vs " << shape_str(b.shape());
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i)
    if (!(va[i] == vb[i] || (std::isnan(va[i]) && std::isnan(vb[i]))))
      return ::testing::AssertionFailure() << "element " << i << ": " << va[i] << " vs " << vb[i];
  return ::testing::AssertionSuccess();
}

// The CPU's NHWC pooling kernels against its NCHW ones: windows with
// padding, ceil mode, dilation (with windows that miss the input), the
// excluded padding of an average, NaNs, f32 and bf16; indices too.
TEST(ChannelsLast, CpuNhwcPoolingEqualsThePlanes) {
  const std::vector<ops::Pool2dParams> params = {
      {.kernel = {2, 2}, .stride = {2, 2}},
      {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}},
      {.kernel = {3, 2}, .stride = {1, 2}, .padding = {1, 0}, .ceil_mode = true},
      {.kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1}, .dilation = {2, 2}},
      {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true, .count_include_pad = false},
  };
  manual_seed(8);
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor x = ops::cast(randn({2, 5, 9, 7}), dt);
    {
      Tensor flat = ops::view(x, {-1});
      ops::fill_(ops::slice(flat, 0, 17, 18), NAN);  // one NaN: it wins its windows
    }
    const Tensor xc = cl(x);
    for (size_t i = 0; i < params.size(); ++i) {
      const ops::Pool2dParams& p = params[i];
      const std::string what = detail::str_cat(dtype_name(dt), " params ", i);
      if (p.dilation[0] == 1) {  // max pooling also takes dilation; average pooling does not
        const Tensor a = ops::avg_pool2d(x, p), ac = ops::avg_pool2d(xc, p);
        EXPECT_TRUE(ops::is_channels_last(ac)) << what;
        EXPECT_TRUE(same(ac, a)) << what;
        const Tensor dy = ops::cast(randn(a.shape()), dt);
        EXPECT_TRUE(all_close(ops::avg_pool2d_backward(cl(dy), xc, p), ops::avg_pool2d_backward(dy, x, p), 0, 0))
            << what;
      }
      auto [y, idx] = ops::max_pool2d(x, p);
      auto [yc, idxc] = ops::max_pool2d(xc, p);
      EXPECT_TRUE(ops::is_channels_last(yc)) << what;
      EXPECT_TRUE(same(yc, y)) << what;
      EXPECT_TRUE(all_close(idxc, idx, 0, 0)) << what;
      const Tensor dy = ops::cast(randn(y.shape()), dt);
      // grad_out either way round; dx channels last.
      const Tensor dx = ops::max_pool2d_backward(dy, x, idx);
      for (const Tensor& g : {cl(dy), dy}) {
        const Tensor dxc = ops::max_pool2d_backward(g, xc, idxc);
        EXPECT_TRUE(ops::is_channels_last(dxc)) << what;
        EXPECT_TRUE(all_close(dxc, dx, 0, 0)) << what;
      }
    }
  }
}

TEST(ChannelsLast, PoolingGivesTheContiguousValuesInTheFormat) {
  manual_seed(6);
  const Tensor x = randn({2, 5, 8, 7}), xc = cl(x);
  const ops::Pool2dParams p{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  auto [y, idx] = ops::max_pool2d(x, p);
  auto [yc, idxc] = ops::max_pool2d(xc, p);
  EXPECT_TRUE(ops::is_channels_last(yc));
  EXPECT_TRUE(all_close(yc, y, 0, 0));
  const Tensor dy = randn(y.shape());
  const Tensor dx = ops::max_pool2d_backward(dy, x, idx), dxc = ops::max_pool2d_backward(cl(dy), xc, idxc);
  EXPECT_TRUE(ops::is_channels_last(dxc));
  EXPECT_TRUE(all_close(dxc, dx, 0, 0));
  const Tensor a = ops::avg_pool2d(x, p), ac = ops::avg_pool2d(xc, p);
  EXPECT_TRUE(ops::is_channels_last(ac));
  EXPECT_TRUE(all_close(ac, a, 1e-6, 1e-6));
  EXPECT_TRUE(all_close(ops::avg_pool2d_backward(cl(dy), xc, p), ops::avg_pool2d_backward(dy, x, p), 1e-6, 1e-6));
  const Tensor g = ops::adaptive_avg_pool2d(x, {2, 2}), gc = ops::adaptive_avg_pool2d(xc, {2, 2});
  EXPECT_TRUE(ops::is_channels_last(gc));
  EXPECT_TRUE(all_close(gc, g, 1e-6, 1e-6));
  const Tensor dg = randn(g.shape());
  const Tensor dga = ops::adaptive_avg_pool2d_backward(dg, x), dgc = ops::adaptive_avg_pool2d_backward(cl(dg), xc);
  EXPECT_TRUE(ops::is_channels_last(dgc));
  EXPECT_TRUE(all_close(dgc, dga, 1e-6, 1e-6));
}

}  // namespace
}  // namespace qk
