// nn::conv_bn: in inference the fused convolution gives what the modules
// give one after the other; in training, or when a gradient is needed, it is
// the modules' own path (same values, same gradients, running stats updated).
#include <gtest/gtest.h>

#include "common/fixtures.h"
#include "qk/autograd/autocast.h"
#include "qk/autograd/functions.h"
#include "qk/nn/nn.h"
#include "qk/tensor/generator.h"

using namespace qk;
using qk::test::all_close;

namespace {

struct Pair {
  nn::Conv2d conv;
  nn::BatchNorm2d bn;
};

// A conv and a batch norm with non-trivial running stats and affine params.
Pair make_pair(int64_t c, int64_t o, int64_t k, int64_t stride, bool conv_bias) {
  Pair p{nn::Conv2d(nn::Conv2dOptions(c, o, k).stride(stride).padding(k / 2).bias(conv_bias)),
         nn::BatchNorm2d(o)};
  NoGradGuard ng;
  p.bn->running_mean.copy_(randn({o}));
  p.bn->running_var.copy_(rand({o}) + 0.5);
  p.bn->weight.copy_(randn({o}));
  p.bn->bias.copy_(randn({o}));
  p.conv->eval();
  p.bn->eval();
  return p;
}

Tensor unfused(Pair& p, const Tensor& x, bool relu, const Tensor& residual) {
  Tensor y = p.bn(p.conv(x));
  if (residual.defined()) y = y + residual;
  return relu ? qk::relu(y) : y;
}

}  // namespace

TEST(ConvBn, InferenceMatchesTheModules) {
  manual_seed(31);
  // 3 channels in (SimpleResNet's stem, oneDNN's plain layout), 16 (blocked),
  // a strided 1x1 with a conv bias.
  for (auto [c, o, k, stride, cb] : {std::tuple{3, 16, 3, 1, false}, {16, 32, 3, 1, false},
                                     {16, 32, 1, 2, true}}) {
    Pair p = make_pair(c, o, k, stride, cb);
    Tensor x = randn({2, c, 8, 8});
    const int64_t ho = stride == 1 ? 8 : 4;
    Tensor res = randn({2, o, ho, ho});
    for (bool relu : {false, true}) {
      for (bool with_res : {false, true}) {
        SCOPED_TRACE(std::to_string(c) + " relu " + std::to_string(relu) + " residual " +
                     std::to_string(with_res));
        Tensor r = with_res ? res : Tensor();
        NoGradGuard ng;
        Tensor ref = unfused(p, x, relu, r);
        Tensor y = nn::conv_bn(*p.conv, *p.bn, x, relu, r);
        EXPECT_TRUE(all_close(y, ref, 1e-5, 1e-5));
      }
    }
  }
}

TEST(ConvBn, TrainingIsTheModulesPath) {
  manual_seed(32);
  Pair p1 = make_pair(8, 16, 3, 1, false);
  Pair p2 = make_pair(8, 16, 3, 1, false);
  {
    NoGradGuard ng;  // same parameters and stats in both
    p2.conv->weight.copy_(p1.conv->weight);
    p2.bn->running_mean.copy_(p1.bn->running_mean);
    p2.bn->running_var.copy_(p1.bn->running_var);
    p2.bn->weight.copy_(p1.bn->weight);
    p2.bn->bias.copy_(p1.bn->bias);
  }
  p1.conv->train();
  p1.bn->train();
  p2.conv->train();
  p2.bn->train();
  Tensor x = randn({4, 8, 6, 6}), res = randn({4, 16, 6, 6});
  Tensor y1 = nn::conv_bn(*p1.conv, *p1.bn, x, true, res);
  Tensor y2 = unfused(p2, x, true, res);
  EXPECT_TRUE(all_close(y1, y2, 0, 0));
  EXPECT_TRUE(all_close(p1.bn->running_mean, p2.bn->running_mean, 0, 0));
  EXPECT_TRUE(all_close(p1.bn->running_var, p2.bn->running_var, 0, 0));
  y1.sum().backward();
  y2.sum().backward();
  EXPECT_TRUE(all_close(p1.conv->weight.grad(), p2.conv->weight.grad(), 0, 0));
  EXPECT_TRUE(all_close(p1.bn->weight.grad(), p2.bn->weight.grad(), 0, 0));
}

TEST(ConvBn, EvalWithGradientsKeepsTheGraph) {
  // Eval mode but grad mode on (e.g. fine-tuning with frozen statistics):
  // the fusion has no backward, so the modules' path must be taken.
  manual_seed(33);
  Pair p = make_pair(8, 16, 3, 1, false);
  Tensor x = randn({2, 8, 6, 6});
  Tensor y = nn::conv_bn(*p.conv, *p.bn, x, true);
  ASSERT_TRUE(y.requires_grad());
  y.sum().backward();
  EXPECT_TRUE(p.conv->weight.grad().defined());
  NoGradGuard ng;
  EXPECT_TRUE(all_close(y.detach(), unfused(p, x, true, Tensor()), 1e-5, 1e-5));
}

TEST(ConvBn, AutocastTakesTheModulesPath) {
  manual_seed(34);
  Pair p = make_pair(16, 16, 3, 1, false);
  Tensor x = randn({2, 16, 6, 6});
  NoGradGuard ng;
  autocast::Guard ac(DType::bf16);
  Tensor y = nn::conv_bn(*p.conv, *p.bn, x, false);
  Tensor ref = unfused(p, x, false, Tensor());
  EXPECT_EQ(y.dtype(), ref.dtype());
  EXPECT_TRUE(all_close(y.to(DType::f32), ref.to(DType::f32), 0, 0));
}
