// Token permutation: the row order (by expert, then token), padding to
// capacity, fused == unfused forward and backward, finite differences, the
// unpermute weighting, and permute_row_blocks.
#include <gtest/gtest.h>

#include "moe_testing.h"
#include "qk/autograd/functions.h"
#include "qk/autograd/gradcheck.h"
#include "qk/transformer/moe.h"

namespace qk::transformer {
namespace {

using moe_test::rel_diff;
using moe_test::seeded_randn;

// 5 tokens, 3 experts: token 0 -> {0, 2}, 1 -> {1}, 2 -> {0, 1}, 3 -> {}, 4 -> {2}.
Tensor example_map() {
  const std::vector<uint8_t> bits{1, 0, 1, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1};
  Tensor m = empty({5, 3}, DType::boolean);
  for (size_t i = 0; i < bits.size(); ++i) m.data_ptr<bool>()[i] = bits[i] != 0;
  return m;
}

// Probabilities where the map is set, zero elsewhere.
Tensor example_probs(DType dt = DType::f32) {
  Tensor p = abs(seeded_randn({5, 3}, 7, DType::f64)) * example_map().to(DType::f64);
  return p.to(dt);
}

TEST(MoEPermute, RowsSortedByExpertThenToken) {
  const TokenPermutationPtr p = make_token_permutation(example_map());
  EXPECT_EQ(p->row_token, (std::vector<int64_t>{0, 2, 1, 2, 0, 4}));
  EXPECT_EQ(p->row_expert, (std::vector<int64_t>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(p->tokens_per_expert, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(p->token_offsets, (std::vector<int64_t>{0, 2, 3, 5, 5, 6}));
  EXPECT_EQ(p->token_rows, (std::vector<int64_t>{0, 4, 2, 1, 3, 5}));
  const Tensor x = arange(0, 5, 1).unsqueeze(1).expand({5, 2}).contiguous();
  for (bool fused : {true, false}) {
    const Tensor rows = permute_tokens(x, p, fused);
    EXPECT_EQ(rows.to_vector<float>(), (std::vector<float>{0, 0, 2, 2, 1, 1, 2, 2, 0, 0, 4, 4})) << fused;
  }
}

TEST(MoEPermute, PaddingToCapacityAddsZeroRowsThatDoNotReachTheOutput) {
  const TokenPermutationPtr plain = make_token_permutation(example_map());
  const TokenPermutationPtr padded = make_token_permutation(example_map(), 3);
  EXPECT_EQ(padded->tokens_per_expert, (std::vector<int64_t>{3, 3, 3}));
  EXPECT_EQ(padded->row_token, (std::vector<int64_t>{0, 2, -1, 1, 2, -1, 0, 4, -1}));
  const Tensor x = seeded_randn({5, 4}, 1);
  for (bool fused : {true, false}) {
    const Tensor rows = permute_tokens(x, padded, fused);
    for (int64_t pad : {2, 5, 8}) EXPECT_EQ(rel_diff(rows.narrow(0, pad, 1), zeros({1, 4})), 0.0) << pad;
    // Padding rows hold garbage after the experts (a bias, say): still no effect.
    const Tensor out = unpermute_tokens(rows + 5.0, example_probs(), padded, fused);
    EXPECT_LE(rel_diff(out, unpermute_tokens(permute_tokens(x, plain) + 5.0, example_probs(), plain)), 1e-7);
  }
  EXPECT_THROW(make_token_permutation(example_map(), 1), ValueError);  // expert 0 has 2 routes
}

TEST(MoEPermute, UnpermuteWeightsEachExpertOutputByItsProbability) {
  // Experts that return their input: out[n] = x[n] * sum_e probs[n, e].
  const TokenPermutationPtr p = make_token_permutation(example_map());
  const Tensor x = seeded_randn({5, 4}, 1), probs = example_probs();
  const Tensor want = x * probs.sum({1}).unsqueeze(1);
  for (bool fused : {true, false})
    EXPECT_LE(rel_diff(unpermute_tokens(permute_tokens(x, p, fused), probs, p, fused), want), 1e-6) << fused;
}

TEST(MoEPermute, FusedEqualsUnfusedWithGradients) {
  for (DType dt : {DType::f32, DType::bf16}) {
    for (int64_t capacity : {0, 3}) {
      const TokenPermutationPtr p = make_token_permutation(example_map(), capacity);
      const Tensor x0 = seeded_randn({5, 6}, 1, dt), probs0 = example_probs();
      const Tensor w = seeded_randn({p->num_rows(), 6}, 2, dt), g = seeded_randn({5, 6}, 3, dt);
      std::vector<Tensor> outs, dx, dprobs;
      for (bool fused : {true, false}) {
        const Tensor x = x0.clone().requires_grad_(), probs = probs0.clone().requires_grad_();
        const Tensor out = unpermute_tokens(permute_tokens(x, p, fused) * w, probs, p, fused);
        out.backward(g);
        outs.push_back(out);
        dx.push_back(x.grad());
        dprobs.push_back(probs.grad());
      }
      const double tol = dt == DType::bf16 ? 1e-2 : 1e-6;
      const std::string what = std::string(dtype_name(dt)) + " capacity " + std::to_string(capacity);
      EXPECT_EQ(outs[0].dtype(), dt);
      EXPECT_LE(rel_diff(outs[0], outs[1]), tol) << what;
      EXPECT_LE(rel_diff(dx[0], dx[1]), tol) << what;
      EXPECT_LE(rel_diff(dprobs[0], dprobs[1]), tol) << what;
      // No gradient where a token has no route.
      const Tensor no_route = dprobs[0].to(DType::f32) * (1.0 - example_map().to(DType::f32));
      EXPECT_EQ(rel_diff(no_route, zeros({5, 3})), 0.0) << what;
    }
  }
}

TEST(MoEPermute, GradientsMatchFiniteDifferences) {
  for (bool fused : {true, false}) {
    const TokenPermutationPtr p = make_token_permutation(example_map(), fused ? 3 : 0);
    const Tensor w = seeded_randn({p->num_rows(), 3}, 2, DType::f64), mix = seeded_randn({5, 3}, 3, DType::f64);
    auto f = [&](const std::vector<Tensor>& in) {
      // probs only where routed: the map's zeros are not inputs of the layer
      const Tensor probs = in[1] * example_map().to(DType::f64);
      return (unpermute_tokens(permute_tokens(in[0], p, fused) * w, probs, p, fused) * mix).sum();
    };
    const auto r = autograd::gradcheck(
        f, {seeded_randn({5, 3}, 1, DType::f64).requires_grad_(), example_probs(DType::f64).requires_grad_()});
    EXPECT_TRUE(r.ok) << (fused ? "fused: " : "unfused: ") << r.message;
  }
}

TEST(MoEPermute, RowBlocksReorderAndBack) {
  const Tensor x = arange(0, 6, 1).unsqueeze(1).contiguous().requires_grad_();  // blocks {0}, {1, 2}, {3, 4, 5}
  const Tensor y = permute_row_blocks(x, {1, 2, 3}, {2, 0, 1});
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{3, 4, 5, 0, 1, 2}));
  y.backward(arange(10, 16, 1).unsqueeze(1));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{13, 14, 15, 10, 11, 12}));
  EXPECT_THROW(permute_row_blocks(x, {1, 2, 3}, {0, 0, 1}), ValueError);
  EXPECT_THROW(permute_row_blocks(x, {1, 2, 2}, {0, 1, 2}), ValueError);
}

}  // namespace
}  // namespace qk::transformer
