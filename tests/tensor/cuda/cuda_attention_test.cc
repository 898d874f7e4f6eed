// The GPT path's heavy ops on a GPU against the CPU: flash attention
// (causal and not, grouped-query heads, the grouped [B, T, Hkv, G, D] query,
// a value head dim apart from the key's, a sliced QKV input, T != S, dropout
// from the same Philox stream) forward and backward, the grouped products
// of MoE experts (empty groups, bias, both layouts, the weight gradients),
// and the fused output layer + cross entropy (ignored targets, token
// weights, several chunks, bf16, the bad-target error). Skipped without a
// CUDA device (they run in scripts/device-check.sh on the GPU machine).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/device_compare.h"
#include "qk/base/error.h"
#include "qk/tensor/cuda.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/attention.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/grouped_linalg.h"
#include "qk/tensor/ops/llm.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"

namespace qk {
namespace {

const Device kCuda0("cuda:0");
using devtest::max_abs_diff;

Tensor dev(const Tensor& t) { return ops::to_device(t, kCuda0); }

class CudaAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  }
};

// The CPU's and the device's results for the same inputs (q may be a view).
void expect_attention_matches(const Tensor& q, const Tensor& k, const Tensor& v, const ops::FlashAttentionParams& p,
                              double tol, const std::string& what) {
  SCOPED_TRACE(what);
  auto c = ops::flash_attention(q, k, v, p);
  auto g = ops::flash_attention(dev(q), dev(k), dev(v), p);
  // tol relative to the outputs' size: a bf16 result of magnitude 4 is a
  // whole ulp (0.03) off when the two sides round one step apart.
  auto scaled = [&](const Tensor& ref) {
    return tol * (1 + ops::amax(ops::unary(UnaryOp::abs, ops::cast(ops::to_device(ref, kCPU), DType::f32))).item_double());
  };
  EXPECT_LT(max_abs_diff(c.out, g.out), scaled(c.out));
  // -inf (a query that sees no key) compared as a large finite value, on the CPU.
  auto finite = [](const Tensor& t) { return ops::clamp(ops::to_device(t, kCPU), -1e30, std::nullopt); };
  EXPECT_LT(max_abs_diff(finite(c.lse), finite(g.lse)), tol);
  Tensor dout = randn(c.out.shape(), TensorOptions(q.dtype()));
  auto [dq, dk, dv] = ops::flash_attention_backward(dout, q, k, v, c.out, c.lse, p);
  auto [gq, gk, gv] = ops::flash_attention_backward(dev(dout), dev(q), dev(k), dev(v), g.out, g.lse, p);
  EXPECT_EQ(gq.shape(), q.shape());
  EXPECT_LT(max_abs_diff(dq, gq), scaled(dq));
  EXPECT_LT(max_abs_diff(dk, gk), scaled(dk));
  EXPECT_LT(max_abs_diff(dv, gv), scaled(dv));
}

TEST_F(CudaAttention, FlashAttentionMatchesTheCpu) {
  for (bool causal : {true, false}) {
    ops::FlashAttentionParams p;
    p.causal = causal;
    const std::string c = causal ? "causal" : "full";
    expect_attention_matches(randn({2, 37, 4, 16}), randn({2, 37, 4, 16}), randn({2, 37, 4, 16}), p, 2e-4, c + " MHA");
    // Grouped-query heads, T < S and T > S (queries that see no key), Dv != D.
    expect_attention_matches(randn({1, 9, 6, 32}), randn({1, 45, 2, 32}), randn({1, 45, 2, 24}), p, 2e-4,
                             c + " GQA T < S");
    expect_attention_matches(randn({2, 40, 4, 8}), randn({2, 33, 1, 8}), randn({2, 33, 1, 8}), p, 2e-4,
                             c + " T > S");
    // The grouped query view of a fused QKV projection [B, T, Hkv, (G + 2) D].
    Tensor qkv = randn({2, 21, 2, 5 * 16});
    Tensor q = ops::reshape(ops::slice(qkv, 3, 0, 3 * 16), {2, 21, 2, 3, 16});
    Tensor k = ops::slice(qkv, 3, 3 * 16, 4 * 16), v = ops::slice(qkv, 3, 4 * 16, 5 * 16);
    expect_attention_matches(q, k, v, p, 2e-4, c + " grouped q from QKV");
    expect_attention_matches(ops::cast(randn({1, 33, 2, 64}), DType::bf16), ops::cast(randn({1, 33, 2, 64}), DType::bf16),
                             ops::cast(randn({1, 33, 2, 64}), DType::bf16), p, 3e-2, c + " bf16");
  }
}

TEST_F(CudaAttention, FlashAttentionDropoutDrawsTheCpuStream) {
  ops::FlashAttentionParams p;
  p.dropout_p = 0.3;
  p.seed = 1234;
  p.offset = 77;
  expect_attention_matches(randn({2, 19, 2, 16}), randn({2, 19, 2, 16}), randn({2, 19, 2, 16}), p, 2e-4, "dropout");
}

TEST_F(CudaAttention, GroupedProductsMatchTheCpu) {
  const std::vector<int64_t> rows{5, 0, 17, 1};
  Tensor x = randn({23, 12});
  std::vector<Tensor> w, wt, bias, gw, gwt, gbias;
  for (size_t g = 0; g < rows.size(); ++g) {
    w.push_back(randn({7, 12}));   // [N, K]
    wt.push_back(randn({12, 7}));  // [K, N]
    bias.push_back(randn({7}));
    gw.push_back(dev(w.back()));
    gwt.push_back(dev(wt.back()));
    gbias.push_back(dev(bias.back()));
  }
  EXPECT_LT(max_abs_diff(ops::grouped_mm(x, rows, w, true, bias), ops::grouped_mm(dev(x), rows, gw, true, gbias)), 1e-4);
  EXPECT_LT(max_abs_diff(ops::grouped_mm(x, rows, wt, false), ops::grouped_mm(dev(x), rows, gwt, false)), 1e-4);
  Tensor dy = randn({23, 7});
  auto c = ops::grouped_mm_tn(dy, x, rows);
  auto g = ops::grouped_mm_tn(dev(dy), dev(x), rows);
  ASSERT_EQ(c.size(), g.size());
  for (size_t i = 0; i < c.size(); ++i) EXPECT_LT(max_abs_diff(c[i], g[i]), 1e-4) << "group " << i;
}

TEST_F(CudaAttention, LinearCrossEntropyMatchesTheCpu) {
  Tensor h = randn({11, 16}), w = randn({50, 16});
  Tensor target = from_vector<int64_t>({3, 49, -100, 0, 7, 7, -100, 12, 48, 1, 2}, {11});
  Tensor tw = rand({11});
  for (DType dt : {DType::f32, DType::bf16})
    for (int64_t chunk : {0, 4}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " chunk " + std::to_string(chunk));
      ops::LinearCrossEntropyOptions o;
      o.grad_hidden = o.grad_weight = true;
      o.chunk_rows = chunk;
      Tensor hc = ops::cast(h, dt), wc = ops::cast(w, dt);
      auto c = ops::linear_cross_entropy(hc, wc, target, tw, o);
      auto g = ops::linear_cross_entropy(dev(hc), dev(wc), dev(target), dev(tw), o);
      const double tol = dt == DType::f32 ? 1e-4 : 5e-2;
      EXPECT_LT(max_abs_diff(c.loss, g.loss), tol * 10);
      EXPECT_LT(max_abs_diff(c.grad_hidden, g.grad_hidden), tol);
      EXPECT_LT(max_abs_diff(c.grad_weight, g.grad_weight), tol);
    }
  try {
    // The check is read when the host next waits for the device (deferred_checks.h).
    auto r = ops::linear_cross_entropy(dev(ops::slice(h, 0, 0, 2)), dev(w), dev(from_vector<int64_t>({0, 50}, {2})),
                                       Tensor(), {});
    (void)r.loss.item_double();
    ADD_FAILURE() << "target 50 of 50";
  } catch (const IndexError& e) {
    EXPECT_NE(e.message().find("target 50 at row 1 is out of range for a vocabulary of 50"), std::string::npos)
        << e.message();
  }
}

}  // namespace
}  // namespace qk
