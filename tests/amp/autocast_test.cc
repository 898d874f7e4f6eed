// Autocast: the per-op dtype policy, the weight-cast cache, nesting, and that
// bf16 convolutions/linears agree with f32 within bf16's precision, forward
// and backward (the f32 weights receive f32 gradients).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "qk/autograd/autocast.h"
#include "qk/autograd/functions.h"
#include "qk/nn/nn.h"
#include "qk/optim/optim.h"
#include "qk/tensor/ops/elementwise.h"

namespace {

using namespace qk;

// ||a - b|| / ||b||: a gradient summed over many positions can cancel, so
// one element's relative error says little; the norm is the stable measure.
double rel_err(const Tensor& a, const Tensor& b) {
  auto x = a.to(DType::f32).to_vector<float>(), y = b.to(DType::f32).to_vector<float>();
  EXPECT_EQ(x.size(), y.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    den += static_cast<double>(y[i]) * y[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

TEST(Autocast, OpPolicy) {
  manual_seed(1);
  Tensor x = randn({2, 3, 8, 8}), w = randn({4, 3, 3, 3}).requires_grad_();
  Tensor fw = randn({5, 16}).requires_grad_();
  EXPECT_FALSE(autocast::is_enabled());
  {
    autocast::Guard amp(DType::bf16);
    EXPECT_TRUE(autocast::is_enabled());
    Tensor y = conv2d(x, w, Tensor(), {.padding = {1, 1}});
    EXPECT_EQ(y.dtype(), DType::bf16);
    Tensor h = relu(y);  // runs in what it is given
    EXPECT_EQ(h.dtype(), DType::bf16);
    Tensor z = linear(randn({2, 16}), fw, Tensor());
    EXPECT_EQ(z.dtype(), DType::bf16);
    EXPECT_EQ(softmax(z, 1).dtype(), DType::f32);
    EXPECT_EQ(log_softmax(z, 1).dtype(), DType::f32);
    EXPECT_EQ(sum(z).dtype(), DType::f32);
    EXPECT_EQ(cross_entropy(z, from_vector<int64_t>({1, 3}, {2})).dtype(), DType::f32);
    Tensor rm = zeros({4}), rv = ones({4});
    // batch_norm keeps a reduced input in its dtype (PyTorch's CPU rule);
    // its running statistics stay f32.
    EXPECT_EQ(batch_norm(y, ones({4}), zeros({4}), rm, rv, true, 0.1, 1e-5).dtype(), DType::bf16);
    EXPECT_EQ(rm.dtype(), DType::f32);
    EXPECT_EQ(layer_norm(y, {8}, Tensor(), Tensor()).dtype(), DType::f32);
    EXPECT_EQ(matmul(randn({3, 4}), randn({4, 2})).dtype(), DType::bf16);
  }
  EXPECT_FALSE(autocast::is_enabled());
  EXPECT_EQ(conv2d(x, w, Tensor(), {.padding = {1, 1}}).dtype(), DType::f32);
}

// bf16 batch_norm (training) against the f32 computation on the same
// bf16-rounded input: output, input/weight/bias gradients and the f32
// running statistics, within bf16's precision.
TEST(Autocast, BatchNormRunsInBf16WithF32Statistics) {
  manual_seed(3);
  const Tensor x32 = (randn({8, 4, 6, 6}) * 3.0 + 1.5).to(DType::bf16).to(DType::f32);
  const Tensor probe = randn({8, 4, 6, 6}).to(DType::bf16).to(DType::f32);
  const Tensor w0 = randn({4}), b0 = randn({4});
  struct Run {
    Tensor out, dx, dw, db, rm, rv;
  };
  auto run = [&](DType dt) {
    Tensor x = x32.to(dt).requires_grad_();
    Tensor w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    Tensor rm = zeros({4}), rv = ones({4});
    Tensor out;
    {
      autocast::Guard amp(DType::bf16);
      out = batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5);
    }
    sum(mul(out, probe.to(out.dtype()))).backward();
    return Run{out, x.grad(), w.grad(), b.grad(), rm, rv};
  };
  const Run lo = run(DType::bf16), ref = run(DType::f32);
  EXPECT_EQ(lo.out.dtype(), DType::bf16);
  EXPECT_EQ(lo.dx.dtype(), DType::bf16);
  EXPECT_EQ(lo.dw.dtype(), DType::f32);
  EXPECT_EQ(lo.db.dtype(), DType::f32);
  EXPECT_EQ(lo.rm.dtype(), DType::f32);
  EXPECT_EQ(lo.rv.dtype(), DType::f32);
  EXPECT_LT(rel_err(lo.out, ref.out), 1e-2);
  EXPECT_LT(rel_err(lo.dx, ref.dx), 2e-2);
  EXPECT_LT(rel_err(lo.dw, ref.dw), 2e-2);
  EXPECT_LT(rel_err(lo.db, ref.db), 2e-2);
  // The statistics come from the same bf16 values accumulated in f32, so they
  // agree to f32 rounding, not just bf16's.
  EXPECT_LT(rel_err(lo.rm, ref.rm), 1e-5);
  EXPECT_LT(rel_err(lo.rv, ref.rv), 1e-5);
}

TEST(Autocast, NestingAndDisabledScope) {
  autocast::Guard outer(DType::f16);
  EXPECT_EQ(autocast::low_dtype(), DType::f16);
  {
    autocast::Guard off(DType::bf16, /*enabled=*/false);
    EXPECT_FALSE(autocast::is_enabled());
    EXPECT_EQ(mm(randn({2, 2}), randn({2, 2})).dtype(), DType::f32);
    {
      autocast::Guard inner(DType::bf16);
      EXPECT_EQ(autocast::low_dtype(), DType::bf16);
    }
    EXPECT_FALSE(autocast::is_enabled());
  }
  EXPECT_TRUE(autocast::is_enabled());
  EXPECT_EQ(autocast::low_dtype(), DType::f16);
  EXPECT_EQ(mm(randn({2, 2}), randn({2, 2})).dtype(), DType::f16);
  EXPECT_THROW(autocast::Guard(DType::f64), Error);
}

TEST(Autocast, WeightCastsAreCachedUntilTheWeightChanges) {
  Tensor w = randn({4, 4}).requires_grad_();
  Tensor x = randn({2, 4});
  {
    autocast::Guard amp(DType::bf16);
    Tensor a = autocast::to_low(w), b = autocast::to_low(w);
    EXPECT_TRUE(a.is_same(b));
    EXPECT_EQ(autocast::cache_size(), 1u);
    (void)linear(x, w, Tensor());
    EXPECT_EQ(autocast::cache_size(), 1u);
    Tensor act = autocast::to_low(x);  // not a leaf requiring grad: not cached
    EXPECT_EQ(autocast::cache_size(), 1u);
    ops::mul_(w, 2.0);  // an optimizer step inside the scope (bumps w's version)
    Tensor c = autocast::to_low(w);
    EXPECT_FALSE(c.is_same(a));
    EXPECT_NEAR(c.to(DType::f32).to_vector<float>()[0], w.to_vector<float>()[0],
                std::fabs(w.to_vector<float>()[0]) * 1e-2);
  }
  EXPECT_EQ(autocast::cache_size(), 0u);
}

// A bf16 conv + linear net against the same net in f32, over 5 random draws:
// outputs and the f32 weights' gradients agree to bf16 precision (8 bits).
// PyTorch 1.13's CPU autocast on this net (same shapes and scales) gives
// gradient errors of 2-6% for conv1's weight and under 0.5% for the linear's.
TEST(Autocast, Bf16MatchesF32ForwardAndBackward) {
  manual_seed(7);
  double sum_err_l = 0, sum_err_w1 = 0, sum_err_b1 = 0, sum_err_w2 = 0;
  const int draws = 5;
  for (int draw = 0; draw < draws; ++draw) {
    Tensor x = randn({4, 3, 16, 16});
    Tensor w1 = (randn({8, 3, 3, 3}) * 0.3).detach().requires_grad_();
    Tensor b1 = (randn({8}) * 0.1).detach().requires_grad_();
    Tensor w2 = (randn({10, 8 * 8 * 8}) * 0.05).detach().requires_grad_();
    Tensor target = from_vector<int64_t>({1, 4, 7, 9}, {4});
    auto run = [&](bool amp) {
      for (Tensor* t : {&w1, &b1, &w2}) t->set_grad(Tensor());
      autocast::Guard g(DType::bf16, amp);
      Tensor h = max_pool2d(relu(conv2d(x, w1, b1, {.padding = {1, 1}})), {.kernel = {2, 2}});
      Tensor logits = linear(h.flatten(1), w2, Tensor());
      Tensor loss = cross_entropy(logits, target);
      loss.backward();
      return std::make_tuple(logits.detach(), w1.grad(), b1.grad(), w2.grad());
    };
    auto [l32, gw1_32, gb1_32, gw2_32] = run(false);
    auto [l16, gw1_16, gb1_16, gw2_16] = run(true);
    EXPECT_EQ(l16.dtype(), DType::bf16);
    EXPECT_EQ(gw1_16.dtype(), DType::f32);  // f32 master weights get f32 gradients
    EXPECT_EQ(gw2_16.dtype(), DType::f32);
    sum_err_l += rel_err(l16, l32);
    sum_err_w1 += rel_err(gw1_16, gw1_32);
    sum_err_b1 += rel_err(gb1_16, gb1_32);
    sum_err_w2 += rel_err(gw2_16, gw2_32);
  }
  EXPECT_LT(sum_err_l / draws, 0.01);
  EXPECT_LT(sum_err_w1 / draws, 0.06);
  EXPECT_LT(sum_err_b1 / draws, 0.06);
  EXPECT_LT(sum_err_w2 / draws, 0.01);
  std::printf("mean relative errors: logits %.4f, conv w %.4f, conv b %.4f, linear w %.4f\n",
              sum_err_l / draws, sum_err_w1 / draws, sum_err_b1 / draws, sum_err_w2 / draws);
}

// f16 convolutions (no native oneDNN kernels: computed in f32, rounded) too.
TEST(Autocast, F16ConvMatchesF32) {
  manual_seed(3);
  Tensor x = randn({2, 4, 8, 8}), w = randn({6, 4, 3, 3}) * 0.2;
  Tensor y32 = conv2d(x, w, Tensor(), {.padding = {1, 1}});
  autocast::Guard amp(DType::f16);
  Tensor y16 = conv2d(x, w, Tensor(), {.padding = {1, 1}});
  EXPECT_EQ(y16.dtype(), DType::f16);
  EXPECT_LT(rel_err(y16, y32), 0.01);
}

// A small bf16 model learns: the loss of a separable 2-class problem falls.
TEST(Autocast, Bf16TrainingConverges) {
  manual_seed(11);
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(1, 4, 3).padding(1)), nn::ReLU(),
                     nn::MaxPool2d(2), nn::Flatten(), nn::Linear(4 * 4 * 4, 2));
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  // Class 1 images are bright in the top half, class 0 in the bottom half.
  Tensor x = randn({32, 1, 8, 8}) * 0.5;
  std::vector<int64_t> labels(32);
  {
    auto v = x.to_vector<float>();
    for (int i = 0; i < 32; ++i) {
      labels[i] = i % 2;
      for (int r = 0; r < 8; ++r)
        for (int c = 0; c < 8; ++c)
          if ((r < 4) == (labels[i] == 1)) v[i * 64 + r * 8 + c] += 1.0f;
    }
    x = from_vector<float>(v, {32, 1, 8, 8});
  }
  Tensor y = from_vector<int64_t>(labels, {32});
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      autocast::Guard amp(DType::bf16);
      loss = cross_entropy(net(x), y);
    }
    loss.backward();
    opt.step();
    double l = loss.item<float>();
    if (step == 0) first = l;
    last = l;
  }
  EXPECT_LT(last, 0.3 * first) << "first " << first << " last " << last;
}

}  // namespace
