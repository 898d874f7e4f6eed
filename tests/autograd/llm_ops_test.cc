// The fused LLM ops (qk/autograd/llm_ops.h) against their unfused
// compositions from qk/autograd/functions.h, forward and backward, in f32
// (tight) and bf16; finite differences in f64; the errors for bad inputs.
//
// bf16 tolerances, against the f32 composition on the same bf16-rounded
// inputs: rotary and SwiGLU compute in f32 and round once, so within 2^-8
// relative (plus 1e-6 absolute). linear_cross_entropy's loss uses f32 logits
// of exact bf16 products (1e-4 relative); its gradients go through dlogits
// rounded to bf16 (as the unfused bf16 layer's would), so 2e-2 relative to
// the gradient's largest element.
#include <gtest/gtest.h>

#include <cmath>

#include "common/fixtures.h"
#include "qk/autograd/autocast.h"
#include "qk/autograd/functions.h"
#include "qk/autograd/gradcheck.h"
#include "qk/autograd/llm_ops.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/llm.h"
#include "qk/tensor/ops/view.h"

namespace qk {
namespace {

using autograd::gradcheck;
using test::all_close;

constexpr double kBf16Rtol = 1.0 / 256;

Tensor f32(const Tensor& t) { return ops::cast(t, DType::f32); }
Tensor f64(const Tensor& t) { return ops::cast(t, DType::f64); }

// Largest |element|, for tolerances relative to a tensor's scale.
double max_abs(const Tensor& t) { return amax(abs(f64(t))).item<double>(); }

// A fresh leaf copy of `t` (in dtype dt) that requires grad.
Tensor leaf(const Tensor& t, DType dt) {
  return (t.dtype() == dt ? ops::clone(t) : ops::cast(t, dt)).requires_grad_();
}

// ---- rotary embedding ----

// cos/sin [T, R] as Megatron's RotaryEmbedding makes them: cat(freqs, freqs).
std::pair<Tensor, Tensor> angles(int64_t T, int64_t R, DType dt = DType::f32) {
  std::vector<double> c(T * R), s(T * R);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < R / 2; ++j) {
      const double f = t * std::pow(10000.0, -2.0 * j / R);
      c[t * R + j] = c[t * R + j + R / 2] = std::cos(f);
      s[t * R + j] = s[t * R + j + R / 2] = std::sin(f);
    }
  return {from_vector<double>(c, {T, R}, dt), from_vector<double>(s, {T, R}, dt)};
}

// Megatron's _apply_rotary_pos_emb_bshd, unfused: on x[..., :R],
// x * cos + rotate_half(x) * sin with rotate_half(x) = cat(-x2, x1); the
// rest of D passes through.
Tensor rotary_unfused(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const int64_t T = x.size(1), D = x.size(3), R = cos.size(1);
  Tensor c = cos.reshape({1, T, 1, R}).to(x.dtype()), s = sin.reshape({1, T, 1, R}).to(x.dtype());
  Tensor xr = x.slice(3, 0, R);
  Tensor x1 = xr.slice(3, 0, R / 2), x2 = xr.slice(3, R / 2, R);
  Tensor rot = add(mul(xr, c), mul(cat({neg(x2), x1}, 3), s));
  return R == D ? rot : cat({rot, x.slice(3, R, D)}, 3);
}

// Forward and d(sum(y * probe))/dx of f(x), x from `x0` in dtype dt. The
// probe is rounded to bf16 values, so a bf16 run's incoming gradient is
// exactly the f32 run's.
struct FwdBwd {
  Tensor y, dx;
};
template <typename F>
FwdBwd run(F&& f, const Tensor& x0, DType dt, const Tensor& probe) {
  Tensor x = leaf(x0, dt);
  Tensor y = f(x);
  sum(mul(y.to(DType::f32), f32(ops::cast(probe, DType::bf16)))).backward();
  return {f32(y), f32(x.grad())};
}

TEST(RotaryEmbedding, EqualsUnfusedForPartialAndFullRotation) {
  Generator g(11);
  const int64_t B = 2, T = 5, H = 3, D = 8;
  for (int64_t R : {int64_t{4}, D}) {  // R < D and R = D
    auto [cos, sin] = angles(T, R);
    Tensor x0 = randn({B, T, H, D}, {}, g), probe = randn({B, T, H, D}, {}, g);
    auto fused = run([&](const Tensor& x) { return rotary_embedding(x, cos, sin); }, x0,
                     DType::f32, probe);
    auto ref = run([&](const Tensor& x) { return rotary_unfused(x, cos, sin); }, x0, DType::f32,
                   probe);
    EXPECT_TRUE(all_close(fused.y, ref.y, 1e-6, 1e-6)) << "R=" << R;
    EXPECT_TRUE(all_close(fused.dx, ref.dx, 1e-6, 1e-6)) << "R=" << R;
    // bf16 against the f32 composition of the rounded input.
    Tensor xb = ops::cast(x0, DType::bf16);
    auto low = run([&](const Tensor& x) { return rotary_embedding(x, cos, sin); }, xb,
                   DType::bf16, probe);
    auto low_ref = run([&](const Tensor& x) { return rotary_unfused(x, cos, sin); }, f32(xb),
                       DType::f32, probe);
    EXPECT_TRUE(all_close(low.y, low_ref.y, kBf16Rtol, 1e-6)) << "bf16 R=" << R;
    EXPECT_TRUE(all_close(low.dx, low_ref.dx, kBf16Rtol, 1e-6)) << "bf16 R=" << R;
  }
}

TEST(RotaryEmbedding, GeneralAnglesAndStridedInput) {
  // Angles that differ between the two halves (nothing assumes cat(f, f)),
  // and q as a slice of a fused [B, T, 3, H, D] projection.
  Generator g(12);
  const int64_t B = 2, T = 3, H = 2, D = 6, R = 6;
  Tensor cos = randn({T, R}, {}, g), sin = randn({T, R}, {}, g);
  Tensor qkv = randn({B, T, 3, H, D}, {}, g);
  Tensor q = ops::select(qkv, 2, 0);
  ASSERT_FALSE(q.is_contiguous());
  EXPECT_TRUE(all_close(rotary_embedding(q, cos, sin), rotary_unfused(q, cos, sin), 1e-6, 1e-6));
  Tensor probe = randn({B, T, H, D}, {}, g);
  auto fused = run([&](const Tensor& x) { return rotary_embedding(x, cos, sin); }, q, DType::f32,
                   probe);
  auto ref = run([&](const Tensor& x) { return rotary_unfused(x, cos, sin); }, q, DType::f32,
                 probe);
  EXPECT_TRUE(all_close(fused.dx, ref.dx, 1e-6, 1e-6));
}

TEST(RotaryEmbedding, FiniteDifferences) {
  Generator g(13);
  auto [cos, sin] = angles(3, 4, DType::f64);
  Tensor probe = randn({1, 3, 2, 6}, TensorOptions(DType::f64), g);
  auto f = [&](const std::vector<Tensor>& in) {
    return sum(mul(rotary_embedding(in[0], cos, sin), probe));
  };
  auto r = gradcheck(f, {randn({1, 3, 2, 6}, TensorOptions(DType::f64), g).requires_grad_()});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(RotaryEmbedding, BadInputsRaiseClearErrors) {
  Tensor x = randn({1, 4, 2, 8});
  auto [cos, sin] = angles(4, 4);
  EXPECT_THROW(rotary_embedding(randn({4, 2, 8}), cos, sin), ValueError);  // not 4-D
  auto [c3, s3] = angles(3, 4);
  EXPECT_THROW(rotary_embedding(x, c3, s3), ValueError);  // T mismatch
  auto [c10, s10] = angles(4, 10);
  EXPECT_THROW(rotary_embedding(x, c10, s10), ValueError);  // R > D
  Tensor c5 = randn({4, 5}), s5 = randn({4, 5});
  EXPECT_THROW(rotary_embedding(x, c5, s5), ValueError);  // odd R
  EXPECT_THROW(rotary_embedding(x, ops::cast(cos, DType::bf16), ops::cast(sin, DType::bf16)),
               TypeError);
  Tensor cg = cos.clone().requires_grad_();
  EXPECT_THROW(rotary_embedding(x, cg, sin), ValueError);
}

// ---- SwiGLU ----

Tensor swiglu_unfused(const Tensor& x) {
  auto halves = chunk(x, 2, x.dim() - 1);
  return mul(silu(halves[0]), halves[1]);
}

TEST(Swiglu, EqualsUnfusedOnOddWidths) {
  Generator g(21);
  for (int64_t F : {1, 7, 33}) {
    Tensor x0 = mul(randn({3, 4, 2 * F}, {}, g), 3.0), probe = randn({3, 4, F}, {}, g);
    auto fused = run([](const Tensor& x) { return swiglu(x); }, x0, DType::f32, probe);
    auto ref = run([](const Tensor& x) { return swiglu_unfused(x); }, x0, DType::f32, probe);
    EXPECT_TRUE(all_close(fused.y, ref.y, 1e-5, 1e-6)) << "F=" << F;
    EXPECT_TRUE(all_close(fused.dx, ref.dx, 1e-5, 1e-6)) << "F=" << F;
    Tensor xb = ops::cast(x0, DType::bf16);
    auto low = run([](const Tensor& x) { return swiglu(x); }, xb, DType::bf16, probe);
    auto low_ref = run([](const Tensor& x) { return swiglu_unfused(x); }, f32(xb), DType::f32,
                       probe);
    EXPECT_TRUE(all_close(low.y, low_ref.y, kBf16Rtol, 1e-6)) << "bf16 F=" << F;
    EXPECT_TRUE(all_close(low.dx, low_ref.dx, kBf16Rtol, 1e-6)) << "bf16 F=" << F;
  }
}

TEST(Swiglu, SaturatesWithoutNaN) {
  Tensor x = from_vector<float>({-200, 200, 3, 5, 0, -1, 200, 0.5f}, {4, 2});  // rows: (a, b)
  auto y = swiglu(x).to_vector<float>();
  EXPECT_EQ(y[0], 0.0f);  // silu(-200) = -0
  EXPECT_FLOAT_EQ(y[1], 3.0f / (1 + std::exp(-3.0f)) * 5);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_FLOAT_EQ(y[3], 100.0f);  // silu(200) = 200
}

TEST(Swiglu, FiniteDifferences) {
  Generator g(22);
  Tensor probe = randn({2, 5}, TensorOptions(DType::f64), g);
  auto f = [&](const std::vector<Tensor>& in) { return sum(mul(swiglu(in[0]), probe)); };
  auto r = gradcheck(f, {randn({2, 10}, TensorOptions(DType::f64), g).requires_grad_()});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Swiglu, OddLastDimIsAnError) {
  EXPECT_THROW(swiglu(randn({2, 7})), ValueError);
  EXPECT_THROW(swiglu(from_vector<int64_t>({1, 2}, {2})), TypeError);
}

// ---- linear_cross_entropy ----

// sum_i w_i * CE(h_i . W^T, t_i), ignored rows contributing 0: the unfused
// output layer and loss.
Tensor lce_unfused(const Tensor& h, const Tensor& w, const Tensor& t, const Tensor& tw,
                   int64_t ignore) {
  Tensor per = cross_entropy(linear(h, w), t, ignore, 0.0, Reduction::none);
  return tw.defined() ? sum(mul(per, tw.to(per.dtype()))) : sum(per);
}

struct LceCase {
  Tensor h, w, t, tw;
};

// Targets in [0, V) with every third row ignored (-100) when `ignore`.
LceCase lce_case(int64_t N, int64_t C, int64_t V, bool ignore, bool weights, Generator& g) {
  LceCase c;
  c.h = randn({N, C}, {}, g);
  c.w = mul(randn({V, C}, {}, g), 0.5);
  std::vector<int64_t> t(N);
  for (int64_t i = 0; i < N; ++i) t[i] = ignore && i % 3 == 1 ? -100 : (i * 7 + 3) % V;
  c.t = from_vector<int64_t>(t, {N});
  if (weights) c.tw = abs(randn({N}, {}, g));
  return c;
}

struct LceOut {
  Tensor loss, dh, dw;
};

LceOut lce_grads(const LceCase& c, DType dt, bool fused) {
  Tensor h = leaf(c.h, dt), w = leaf(c.w, dt);
  Tensor loss = fused ? linear_cross_entropy(h, w, c.t, c.tw) : lce_unfused(h, w, c.t, c.tw, -100);
  loss.backward();
  return {f64(loss), f64(h.grad()), f64(w.grad())};
}

TEST(LinearCrossEntropy, EqualsUnfusedWithIgnoredRowsAndWeights) {
  Generator g(31);
  for (auto [N, ignore, weights] : {std::tuple{13, true, true}, std::tuple{1, false, false},
                                    std::tuple{6, true, false}}) {
    LceCase c = lce_case(N, 16, 37, ignore, weights, g);
    LceOut fused = lce_grads(c, DType::f32, true), ref = lce_grads(c, DType::f32, false);
    EXPECT_TRUE(all_close(fused.loss, ref.loss, 1e-5, 1e-5)) << "N=" << N;
    EXPECT_TRUE(all_close(fused.dh, ref.dh, 1e-5, 1e-6)) << "N=" << N;
    EXPECT_TRUE(all_close(fused.dw, ref.dw, 1e-5, 1e-6)) << "N=" << N;
  }
}

TEST(LinearCrossEntropy, ChunksOfRowsGiveTheSameResult) {
  // Several chunks, N not a multiple of the chunk, V not a multiple of the
  // lane width; rows ignored inside chunks (gathered) and at chunk edges.
  Generator g(32);
  LceCase c = lce_case(23, 12, 53, true, true, g);
  LceOut ref = lce_grads(c, DType::f32, false);
  for (int64_t chunk : {1, 4, 5, 100}) {
    ops::LinearCrossEntropyOptions o;
    o.grad_hidden = o.grad_weight = true;
    o.chunk_rows = chunk;
    auto r = ops::linear_cross_entropy(c.h, c.w, c.t, c.tw, o);
    EXPECT_TRUE(all_close(f64(r.loss), ref.loss, 1e-5, 1e-5)) << "chunk " << chunk;
    EXPECT_TRUE(all_close(f64(r.grad_hidden), ref.dh, 1e-5, 1e-6)) << "chunk " << chunk;
    EXPECT_TRUE(all_close(f64(r.grad_weight), ref.dw, 1e-5, 1e-6)) << "chunk " << chunk;
    // bf16 through several chunks (the f32 dW accumulator).
    LceCase cb{ops::cast(c.h, DType::bf16), ops::cast(c.w, DType::bf16), c.t, c.tw};
    auto rb = ops::linear_cross_entropy(cb.h, cb.w, cb.t, cb.tw, o);
    LceOut rb_ref = lce_grads({f32(cb.h), f32(cb.w), c.t, c.tw}, DType::f32, false);
    EXPECT_TRUE(all_close(f64(rb.loss), rb_ref.loss, 1e-4, 1e-4)) << "bf16 chunk " << chunk;
    EXPECT_TRUE(all_close(f64(rb.grad_hidden), rb_ref.dh, 2e-2, 2e-2 * max_abs(rb_ref.dh)));
    EXPECT_TRUE(all_close(f64(rb.grad_weight), rb_ref.dw, 2e-2, 2e-2 * max_abs(rb_ref.dw)));
  }
}

TEST(LinearCrossEntropy, Bf16MatchesF32OfRoundedInputs) {
  Generator g(33);
  LceCase c = lce_case(29, 40, 67, true, true, g);
  c.h = f32(ops::cast(c.h, DType::bf16));
  c.w = f32(ops::cast(c.w, DType::bf16));
  LceOut low = lce_grads(c, DType::bf16, true), ref = lce_grads(c, DType::f32, false);
  EXPECT_TRUE(all_close(low.loss, ref.loss, 1e-4, 1e-4));
  EXPECT_TRUE(all_close(low.dh, ref.dh, 2e-2, 2e-2 * max_abs(ref.dh)));
  EXPECT_TRUE(all_close(low.dw, ref.dw, 2e-2, 2e-2 * max_abs(ref.dw)));
}

TEST(LinearCrossEntropy, BackwardScalesByTheIncomingGradientAndRepeats) {
  Generator g(34);
  LceCase c = lce_case(7, 8, 11, true, true, g);
  LceOut ref = lce_grads(c, DType::f32, false);
  Tensor h = leaf(c.h, DType::f32), w = leaf(c.w, DType::f32);
  Tensor loss = mul(linear_cross_entropy(h, w, c.t, c.tw), 3.0);
  loss.backward({}, /*retain_graph=*/true);
  EXPECT_TRUE(all_close(f64(h.grad()), mul(ref.dh, 3.0), 1e-5,
                        1e-6));
  // A second backward through the retained graph recomputes the gradients.
  loss.backward();
  EXPECT_TRUE(all_close(f64(w.grad()), mul(ref.dw, 6.0), 1e-5,
                        1e-6));
}

// f16 has no kernel: it runs the f32 one on the same (exactly widened)
// values and hands back f16 gradients.
TEST(LinearCrossEntropy, F16RunsInF32AndReturnsF16Gradients) {
  Generator g(36);
  LceCase c = lce_case(7, 8, 11, true, true, g);
  c.h = ops::cast(ops::cast(c.h, DType::f16), DType::f32);  // values f16 holds exactly
  c.w = ops::cast(ops::cast(c.w, DType::f16), DType::f32);
  const LceOut ref = lce_grads(c, DType::f32, true);
  Tensor h = leaf(c.h, DType::f16), w = leaf(c.w, DType::f16);
  Tensor loss = linear_cross_entropy(h, w, c.t, c.tw);
  EXPECT_EQ(loss.dtype(), DType::f32);
  EXPECT_NEAR(loss.item<double>(), ref.loss.item<double>(), 1e-6 * std::abs(ref.loss.item<double>()));
  loss.backward();
  ASSERT_EQ(h.grad().dtype(), DType::f16);
  ASSERT_EQ(w.grad().dtype(), DType::f16);
  EXPECT_TRUE(all_close(f64(h.grad()), ref.dh, 2e-3, 1e-4));  // f16 rounding of the f32 gradients
  EXPECT_TRUE(all_close(f64(w.grad()), ref.dw, 2e-3, 1e-4));
}

TEST(LinearCrossEntropy, EveryRowIgnoredGivesZero) {
  Generator g(35);
  Tensor h = randn({3, 4}, {}, g).requires_grad_(), w = randn({5, 4}, {}, g).requires_grad_();
  Tensor t = from_vector<int64_t>({-1, -1, -1}, {3});
  Tensor loss = linear_cross_entropy(h, w, t, Tensor(), -1);
  EXPECT_EQ(loss.item<double>(), 0.0);
  loss.backward();
  EXPECT_EQ(max_abs(h.grad()), 0.0);
  EXPECT_EQ(max_abs(w.grad()), 0.0);
}

TEST(LinearCrossEntropy, UnderBf16AutocastGradientsReachF32Weights) {
  Generator g(36);
  LceCase c = lce_case(9, 16, 21, true, true, g);
  LceOut ref = lce_grads(c, DType::f32, false);
  Tensor h = leaf(c.h, DType::f32), w = leaf(c.w, DType::f32);
  Tensor loss;
  {
    autocast::Guard amp(DType::bf16);
    loss = linear_cross_entropy(h, w, c.t, c.tw);
  }
  EXPECT_EQ(loss.dtype(), DType::f32);
  loss.backward();
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_TRUE(all_close(f64(loss), ref.loss, 2e-2, 0));
  EXPECT_TRUE(all_close(f64(w.grad()), ref.dw, 5e-2, 5e-2 * max_abs(ref.dw)));
}

TEST(LinearCrossEntropy, FiniteDifferences) {
  Generator g(37);
  Tensor t = from_vector<int64_t>({2, -100, 0, 4}, {4});
  Tensor tw = from_vector<double>({0.5, 1, 2, 0.25}, {4}, DType::f64);
  auto f = [&](const std::vector<Tensor>& in) { return linear_cross_entropy(in[0], in[1], t, tw); };
  auto r = gradcheck(f, {randn({4, 3}, TensorOptions(DType::f64), g).requires_grad_(),
                         randn({5, 3}, TensorOptions(DType::f64), g).requires_grad_()});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(LinearCrossEntropy, BadInputsRaiseClearErrors) {
  Tensor h = randn({3, 4}), w = randn({5, 4});
  Tensor t = from_vector<int64_t>({0, 1, 2}, {3});
  EXPECT_THROW(linear_cross_entropy(h, w, from_vector<int64_t>({0, 5, 1}, {3})), IndexError);
  EXPECT_THROW(linear_cross_entropy(h, randn({5, 3}), t), ValueError);        // C differs
  EXPECT_THROW(linear_cross_entropy(randn({2, 3, 4}), w, t), ValueError);     // not 2-D
  EXPECT_THROW(linear_cross_entropy(h, w, from_vector<int64_t>({0}, {1})), ValueError);
  EXPECT_THROW(linear_cross_entropy(h, w, from_vector<float>({0, 1, 2}, {3})), TypeError);
  EXPECT_THROW(linear_cross_entropy(h, ops::cast(w, DType::bf16), t), TypeError);
  EXPECT_THROW(linear_cross_entropy(h, w, t, ones({2})), ValueError);         // weight shape
  EXPECT_THROW(linear_cross_entropy(h, w, t, ones({3}).requires_grad_()), ValueError);
}

}  // namespace
}  // namespace qk
