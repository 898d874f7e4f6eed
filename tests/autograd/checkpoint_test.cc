// Activation checkpointing (qk/autograd/checkpoint.h): gradients equal the
// plain graph's bit for bit (dropout included: the re-run draws the same
// masks from the default and the listed generators), parameters' hooks fire
// during the re-run and callbacks they queue run after the whole backward,
// nested regions, autocast replayed, and the errors.
#include "qk/autograd/checkpoint.h"

#include <gtest/gtest.h>

#include "qk/autograd/autocast.h"
#include "qk/autograd/autograd.h"
#include "qk/autograd/functions.h"

namespace {
using namespace qk;
using V = std::vector<Tensor>;

// Two dropout-tanh-linear blocks; the second block's dropout draws from `own`.
struct Net {
  Tensor w1, b1, w2;
  Generator own{99};
  Net() {
    Generator g(5);
    w1 = randn({16, 8}, {}, g).requires_grad_();
    b1 = randn({16}, {}, g).requires_grad_();
    w2 = randn({4, 16}, {}, g).requires_grad_();
  }
  Tensor block1(const Tensor& x) { return tanh(linear(dropout(x, 0.25, true), w1, b1)); }
  Tensor block2(const Tensor& h) { return linear(dropout(h, 0.5, true, own), w2); }
  void zero() {
    for (Tensor* p : {&w1, &b1, &w2}) p->set_grad(Tensor());
  }
  V grads() const { return {w1.grad(), b1.grad(), w2.grad()}; }
};

Tensor input() {
  Generator g(11);
  return randn({6, 8}, {}, g).requires_grad_();
}

void expect_bitwise(const V& a, const V& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].defined() && b[i].defined()) << i;
    EXPECT_EQ(a[i].to_vector<float>(), b[i].to_vector<float>()) << "tensor " << i;
  }
}

// The plain run's loss, gradients and input gradient; generators seeded alike.
struct RunResult {
  float loss;
  V grads;
  Tensor input_grad;
  uint64_t default_offset, own_offset;
};

RunResult run(bool checkpointed, bool nested = false) {
  Net net;
  manual_seed(3);
  Tensor x = input();
  Tensor out;
  if (!checkpointed) {
    out = net.block2(net.block1(x));
  } else if (!nested) {
    Tensor h = autograd::checkpoint([&](const V& in) { return V{net.block1(in[0])}; }, {x})[0];
    out = autograd::checkpoint([&](const V& in) { return V{net.block2(in[0])}; }, {h}, {.generators = {&net.own}})[0];
  } else {
    out = autograd::checkpoint(
        [&](const V& in) {
          Tensor h = autograd::checkpoint([&](const V& i2) { return V{net.block1(i2[0])}; }, {in[0]})[0];
          return V{net.block2(h)};
        },
        {x}, {.generators = {&net.own}})[0];
  }
  Tensor loss = sum(out * out);
  const uint64_t d = default_generator().offset(), o = net.own.offset();
  loss.backward();
  // The re-run put the generators back: the run goes on where the forward left them.
  EXPECT_EQ(default_generator().offset(), d);
  EXPECT_EQ(net.own.offset(), o);
  return {loss.item<float>(), net.grads(), x.grad(), d, o};
}

TEST(Checkpoint, GradientsEqualThePlainGraphBitwiseWithDropout) {
  const RunResult plain = run(false), ck = run(true);
  EXPECT_EQ(plain.loss, ck.loss);
  expect_bitwise(plain.grads, ck.grads);
  expect_bitwise({plain.input_grad}, {ck.input_grad});
  EXPECT_EQ(plain.default_offset, ck.default_offset);
  EXPECT_EQ(plain.own_offset, ck.own_offset);
}

TEST(Checkpoint, NestedRegionsGiveTheSameGradients) {
  const RunResult plain = run(false), nested = run(true, /*nested=*/true);
  expect_bitwise(plain.grads, nested.grads);
  expect_bitwise({plain.input_grad}, {nested.input_grad});
}

// Without restoring the listed generator the masks differ: the test above can fail.
TEST(Checkpoint, AnUnlistedGeneratorGivesOtherMasks) {
  const RunResult plain = run(false);
  Net net;
  manual_seed(3);
  Tensor x = input();
  Tensor h = net.block1(x);
  Tensor out = autograd::checkpoint([&](const V& in) { return V{net.block2(in[0])}; }, {h})[0];
  sum(out * out).backward();
  EXPECT_NE(plain.grads[2].to_vector<float>(), net.w2.grad().to_vector<float>());
}

TEST(Checkpoint, KeepsOnlyItsInputsAndOneNode) {
  Net net;
  Tensor x = input();
  Tensor h = autograd::checkpoint([&](const V& in) { return V{net.block1(in[0])}; }, {x})[0];
  ASSERT_NE(h.grad_fn(), nullptr);
  EXPECT_EQ(h.grad_fn()->name(), "CheckpointBackward");
  EXPECT_EQ(h.grad_fn()->next_edges.size(), 1u);  // the input only: the parameters come from the re-run
}

TEST(Checkpoint, ParameterHooksFireInTheRerunAndCallbacksAfterTheBackward) {
  Net net;
  std::vector<std::string> events;
  net.w1.register_post_accumulate_grad_hook([&](const Tensor&) {
    events.push_back("w1");
    autograd::queue_callback([&] { events.push_back("end"); });
  });
  net.w2.register_post_accumulate_grad_hook([&](const Tensor&) { events.push_back("w2"); });
  Tensor x = input();
  Tensor h = autograd::checkpoint([&](const V& in) { return V{net.block1(in[0])}; }, {x})[0];
  Tensor out = net.block2(h);
  sum(out).backward();
  EXPECT_EQ(events, (std::vector<std::string>{"w2", "w1", "end"}));
}

TEST(Checkpoint, WithoutGradModeOrGradInputsItJustRuns) {
  Net net;
  int calls = 0;
  auto fn = [&](const V& in) {
    ++calls;
    return V{net.block1(in[0])};
  };
  {
    NoGradGuard no_grad;
    Tensor h = autograd::checkpoint(fn, {input()})[0];
    EXPECT_EQ(h.grad_fn(), nullptr);
  }
  Tensor h = autograd::checkpoint(fn, {input().detach()})[0];  // the parameters still need grad: plain graph
  EXPECT_EQ(calls, 2);
  ASSERT_NE(h.grad_fn(), nullptr);
  EXPECT_NE(h.grad_fn()->name(), "CheckpointBackward");
}

TEST(Checkpoint, AnInputReturnedAsIsIsCopied) {
  Tensor x = input();
  Tensor y = autograd::checkpoint([](const V& in) { return V{in[0]}; }, {x})[0];
  EXPECT_FALSE(y.is_same(x));
  EXPECT_TRUE(x.is_leaf());
  sum(y * 2.0).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), std::vector<float>(48, 2.0f));
}

TEST(Checkpoint, AnInputWrittenInPlaceAfterTheForwardIsAnError) {
  Net net;
  Tensor x = input();
  Tensor base = x * 1.0;  // a non-leaf we may write into
  Tensor h = autograd::checkpoint([&](const V& in) { return V{net.block1(in[0])}; }, {base})[0];
  {
    NoGradGuard no_grad;
    base.fill_(0.0);
    base.bump_version();
  }
  try {
    sum(h).backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("modified in place after its forward"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, TheRerunSeesTheForwardsAutocast) {
  Net plain_net, ck_net;
  Tensor x1 = input(), x2 = input();
  Tensor a, b;
  {
    autocast::Guard amp(DType::bf16);
    a = linear(x1, plain_net.w1);
    b = autograd::checkpoint([&](const V& in) { return V{linear(in[0], ck_net.w1)}; }, {x2})[0];
  }
  EXPECT_EQ(a.dtype(), DType::bf16);
  EXPECT_EQ(b.dtype(), DType::bf16);
  sum(a.to(DType::f32)).backward();
  sum(b.to(DType::f32)).backward();  // outside the guard: the re-run must still be bf16
  expect_bitwise({plain_net.w1.grad(), x1.grad()}, {ck_net.w1.grad(), x2.grad()});
}

}  // namespace
