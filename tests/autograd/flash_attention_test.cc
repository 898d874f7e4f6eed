// flash_attention against the unfused composition (matmul, masked softmax,
// matmul, all existing differentiable ops, in f64): forward and all three
// gradients, causal or not, grouped-query heads, T != S, strided views of a
// fused QKV tensor, a value head dim other than the query/key one (multi-latent
// attention), f32 / bf16 / f16, dropout with the mask rebuilt from the
// documented Philox stream, every SIMD variant this CPU runs, the split and
// unsplit backward schedules; then gradcheck and the errors.
#include <gtest/gtest.h>

#include <cmath>

#include "common/fixtures.h"
#include "qk/autograd/autocast.h"
#include "qk/autograd/functions.h"
#include "qk/autograd/gradcheck.h"
#include "qk/autograd/llm_ops.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/attention.h"

namespace qk {
namespace {

using test::all_close;

struct Shape4 {
  int64_t B, T, S, Hq, Hkv, D;
  int64_t Dv = 0;  // value head dim (0: D)
  int64_t dv() const { return Dv > 0 ? Dv : D; }
};

// The dropout factor (0 or 1/(1-p)) of every element of the [B, Hq, T, S]
// probabilities, from the stream ops::FlashAttentionParams documents.
Tensor dropout_factors(const Shape4& s, double p, uint64_t seed, uint64_t offset) {
  const uint32_t keep_below = static_cast<uint32_t>((1.0 - p) * 16777216.0);
  const int64_t per_row = (s.S + 3) / 4;
  std::vector<double> z(static_cast<size_t>(s.B * s.Hq * s.T * s.S));
  for (int64_t row = 0; row < s.B * s.Hq * s.T; ++row)
    for (int64_t key = 0; key < s.S; ++key) {
      uint32_t w[4];
      philox4x32(seed, offset + static_cast<uint64_t>(row * per_row + key / 4), w);
      z[row * s.S + key] = (w[key % 4] >> 8) < keep_below ? 1.0 / (1.0 - p) : 0.0;
    }
  return from_vector<double>(z, {s.B, s.Hq, s.T, s.S});
}

// softmax(q k^T * scale + causal mask) [* dropout] v, in the dtype of q.
Tensor unfused_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                         double scale, const Tensor& drop = Tensor()) {
  const int64_t B = q.size(0), T = q.size(1), Hq = q.size(2);
  const int64_t S = k.size(1), Hkv = k.size(2), G = Hq / Hkv;
  auto heads = [&](const Tensor& x) {  // [B, S, Hkv, D] -> [B, Hq, S, D], repeating kv heads
    const int64_t D = x.size(3);
    return x.permute({0, 2, 1, 3}).unsqueeze(2).expand({B, Hkv, G, S, D}).reshape({B, Hq, S, D});
  };
  Tensor scores = matmul(q.permute({0, 2, 1, 3}), heads(k).transpose(2, 3)) * scale;
  if (causal) {  // hide key s from query t when s > t + S - T
    std::vector<bool> hide(static_cast<size_t>(T * S));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t key = 0; key < S; ++key) hide[t * S + key] = key > t + S - T;
    scores = masked_fill(scores, from_vector<bool>(hide, {T, S}), -INFINITY);
  }
  Tensor probs = softmax(scores, -1);
  if (drop.defined()) probs = probs * drop.to(probs.dtype());
  return matmul(probs, heads(v)).permute({0, 2, 1, 3}).contiguous();
}

struct Inputs {
  Tensor q, k, v, dout;
};

Inputs make_inputs(const Shape4& s, uint64_t seed) {
  Generator g(seed);
  Inputs in;
  in.q = randn({s.B, s.T, s.Hq, s.D}, {}, g);
  in.k = randn({s.B, s.S, s.Hkv, s.D}, {}, g);
  in.v = randn({s.B, s.S, s.Hkv, s.dv()}, {}, g);
  in.dout = randn({s.B, s.T, s.Hq, s.dv()}, {}, g);
  return in;
}

struct Grads {
  Tensor out, dq, dk, dv;
};

// Forward and backward of `f` at (q, k, v) converted to dt, seeded with dout.
template <typename F>
Grads run(const Inputs& in, DType dt, F&& f) {
  Tensor q = in.q.to(dt).detach().requires_grad_(), k = in.k.to(dt).detach().requires_grad_(),
         v = in.v.to(dt).detach().requires_grad_();
  Tensor out = f(q, k, v);
  out.backward(in.dout.to(out.dtype()));
  return {out, q.grad(), k.grad(), v.grad()};
}

Grads reference(const Inputs& in, bool causal, double scale, const Tensor& drop = Tensor()) {
  return run(in, DType::f64, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
    return unfused_attention(q, k, v, causal, scale, drop);
  });
}

void expect_close(const Grads& got, const Grads& want, double rtol, double atol,
                  const std::string& what) {
  auto f64 = [](const Tensor& t) { return t.to(DType::f64); };
  EXPECT_TRUE(all_close(f64(got.out), want.out, rtol, atol)) << what << ": out";
  EXPECT_TRUE(all_close(f64(got.dq), want.dq, rtol, atol)) << what << ": dq";
  EXPECT_TRUE(all_close(f64(got.dk), want.dk, rtol, atol)) << what << ": dk";
  EXPECT_TRUE(all_close(f64(got.dv), want.dv, rtol, atol)) << what << ": dv";
}

std::string name(const Shape4& s, bool causal) {
  return "B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " S" + std::to_string(s.S) +
         " Hq" + std::to_string(s.Hq) + " Hkv" + std::to_string(s.Hkv) + " D" +
         std::to_string(s.D) + " Dv" + std::to_string(s.dv()) + (causal ? " causal" : " full");
}

// Checks flash_attention against the f64 reference in dt, for every SIMD variant.
void check(const Shape4& s, bool causal, DType dt = DType::f32, double tol = 1e-5,
           uint64_t seed = 1) {
  const Inputs in = make_inputs(s, seed);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.D));
  const Grads want = reference(in, causal, scale);
  for (const std::string& isa : ops::flash_attention_cpu_variants()) {
    ops::set_flash_attention_cpu_variant(isa);
    const Grads got = run(in, dt, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
      return flash_attention(q, k, v, {.causal = causal});
    });
    EXPECT_EQ(got.out.dtype(), dt);
    expect_close(got, want, tol, tol, name(s, causal) + " " + dtype_name(dt) + " " + isa);
  }
  ops::set_flash_attention_cpu_variant("");
}

class FlashAttentionSeq : public ::testing::TestWithParam<int64_t> {};

TEST_P(FlashAttentionSeq, MatchesUnfusedCausal) {
  const int64_t T = GetParam();
  check({2, T, T, 3, 3, 16}, true);
}

TEST_P(FlashAttentionSeq, MatchesUnfusedFull) {
  const int64_t T = GetParam();
  check({2, T, T, 3, 3, 16}, false);
}

TEST_P(FlashAttentionSeq, MatchesUnfusedGroupedQuery) {
  const int64_t T = GetParam();
  check({1, T, T, 4, 2, 8}, true);
  check({1, T, T, 4, 1, 8}, false);
}

INSTANTIATE_TEST_SUITE_P(SeqLens, FlashAttentionSeq, ::testing::Values(1, 7, 64, 257));

TEST(FlashAttention, RawOpReturnsTheRowLogsumexp) {
  const Shape4 s{2, 19, 23, 4, 2, 8};
  const Inputs in = make_inputs(s, 14);
  ops::FlashAttentionParams p;
  p.scale = 0.3;
  auto [out, lse] = ops::flash_attention(in.q, in.k, in.v, p);
  ASSERT_EQ(lse.shape(), (Shape{2, 4, 19}));
  // logsumexp over the visible keys of q.k * scale, in f64.
  auto q = in.q.to_vector<double>(), k = in.k.to_vector<double>();
  auto got = lse.to_vector<double>();
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.Hq; ++h)
      for (int64_t t = 0; t < s.T; ++t) {
        double mx = -INFINITY, sum = 0;
        std::vector<double> sc;
        for (int64_t key = 0; key <= t + s.S - s.T; ++key) {
          double dot = 0;
          for (int64_t d = 0; d < s.D; ++d)
            dot += q[((b * s.T + t) * s.Hq + h) * s.D + d] *
                   k[((b * s.S + key) * s.Hkv + h / 2) * s.D + d];
          sc.push_back(dot * 0.3);
          mx = std::max(mx, dot * 0.3);
        }
        for (double x : sc) sum += std::exp(x - mx);
        EXPECT_NEAR(got[(b * s.Hq + h) * s.T + t], mx + std::log(sum), 1e-5) << b << " " << h << " " << t;
      }
}

TEST(FlashAttention, HeadDimsNotAMultipleOfTheVectorWidth) {
  check({1, 19, 19, 2, 2, 5}, true);
  check({1, 70, 70, 2, 1, 72}, true);
}

TEST(FlashAttention, ValueHeadDimOtherThanQueryKey) {
  // Multi-latent attention: q/k heads of qk_head_dim + qk_pos_emb_head_dim,
  // values of v_head_dim, smaller or larger, across the block sizes.
  check({2, 19, 19, 4, 4, 24, 16}, true);
  check({1, 70, 70, 4, 2, 12, 40}, true);
  check({1, 3, 130, 2, 1, 16, 5}, true);
  check({2, 33, 65, 2, 2, 20, 8}, false);
}

TEST(FlashAttention, ValueHeadDimOtherThanQueryKeySplitSchedule) {
  // One (batch, kv head) pair: the backward sums partial dK/dV of their widths.
  const int prev = num_threads();
  const Shape4 s{1, 300, 300, 2, 1, 24, 16};
  const Inputs in = make_inputs(s, 17);
  const Grads want = reference(in, true, 0.2);
  for (int threads : {1, 3}) {
    set_num_threads(threads);
    const Grads got = run(in, DType::f32, [](const Tensor& q, const Tensor& k, const Tensor& v) {
      return flash_attention(q, k, v, {.scale = 0.2});
    });
    EXPECT_EQ(got.out.shape(), (Shape{1, 300, 2, 16}));
    expect_close(got, want, 1e-5, 1e-5, name(s, true) + " threads " + std::to_string(threads));
  }
  set_num_threads(prev);
}

TEST(FlashAttention, ValueHeadDimOtherThanQueryKeyBf16AndDropout) {
  // bf16 through every variant (the AVX512-BF16 products pair dO along Dv),
  // odd Dv (the f32 backward), and dropout with the documented mask.
  for (const Shape4& s : {Shape4{1, 70, 70, 4, 2, 24, 16}, Shape4{1, 33, 33, 2, 1, 16, 7}}) {
    Inputs in = make_inputs(s, 18);
    for (Tensor* t : {&in.q, &in.k, &in.v, &in.dout}) *t = t->to(DType::bf16).to(DType::f32);
    const Grads want = reference(in, true, 1.0 / std::sqrt(static_cast<double>(s.D)));
    for (const std::string& isa : ops::flash_attention_cpu_variants()) {
      ops::set_flash_attention_cpu_variant(isa);
      const Grads got = run(in, DType::bf16, [](const Tensor& q, const Tensor& k, const Tensor& v) {
        return flash_attention(q, k, v);
      });
      expect_close(got, want, 3e-2, 3e-2, name(s, true) + " bf16 " + isa);
    }
    ops::set_flash_attention_cpu_variant("");
  }
  const Shape4 s{2, 40, 40, 4, 2, 24, 8};
  const Inputs in = make_inputs(s, 19);
  Generator gen(21);
  gen.set_state(21, 3);
  const Grads want = reference(in, true, 0.25, dropout_factors(s, 0.25, 21, 3));
  const Grads got = run(in, DType::f32, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
    return flash_attention(q, k, v, {.scale = 0.25, .dropout_p = 0.25, .training = true, .generator = &gen});
  });
  expect_close(got, want, 1e-5, 1e-5, "dropout, Dv 8 of D 24");
}

TEST(FlashAttention, DecodeAgainstLongerKeys) {
  // Bottom-right causal alignment: T = 1 sees all S keys, T = 3 sees S-2.. .
  check({2, 1, 7, 4, 2, 8}, true);
  check({2, 3, 7, 4, 2, 8}, true);
  check({1, 5, 130, 2, 2, 16}, true);
  check({1, 3, 7, 2, 1, 8}, false);
}

TEST(FlashAttention, RowsWithoutKeysGiveZeros) {
  // T > S with the causal mask: query t sees keys <= t - 2, so rows 0 and 1 see none.
  const Shape4 s{1, 4, 2, 2, 1, 8};
  const Inputs in = make_inputs(s, 3);
  const Grads got = run(in, DType::f32, [](const Tensor& q, const Tensor& k, const Tensor& v) {
    return flash_attention(q, k, v);
  });
  auto out = got.out.to_vector<double>(), dq = got.dq.to_vector<double>();
  for (size_t i = 0; i < 2 * 2 * 8; ++i) {  // rows t = 0, 1 of both heads
    EXPECT_EQ(out[i], 0.0) << i;
    EXPECT_EQ(dq[i], 0.0) << i;
  }
  // Rows that see keys match the reference.
  Inputs tail = in;
  tail.q = in.q.slice(1, 2, 4).contiguous();
  tail.dout = in.dout.slice(1, 2, 4).contiguous();
  const Grads want = reference(tail, true, 1.0 / std::sqrt(8.0));
  EXPECT_TRUE(all_close(got.out.slice(1, 2, 4).to(DType::f64), want.out, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(got.dk.to(DType::f64), want.dk, 1e-5, 1e-5));
}

TEST(FlashAttention, StridedSlicesOfFusedQkv) {
  const int64_t B = 2, T = 37, Hq = 4, Hkv = 2, D = 16;
  Generator g(4);
  Tensor qkv = randn({B, T, (Hq + 2 * Hkv) * D}, {}, g).requires_grad_();
  Tensor dout = randn({B, T, Hq, D}, {}, g);
  auto split = [&](const Tensor& x) {
    return std::array<Tensor, 3>{x.narrow(2, 0, Hq * D).view({B, T, Hq, D}),
                                 x.narrow(2, Hq * D, Hkv * D).view({B, T, Hkv, D}),
                                 x.narrow(2, (Hq + Hkv) * D, Hkv * D).view({B, T, Hkv, D})};
  };
  auto [q, k, v] = split(qkv);
  ASSERT_FALSE(q.is_contiguous());
  Tensor out = flash_attention(q, k, v);
  out.backward(dout);
  Tensor want_qkv = qkv.detach().to(DType::f64).requires_grad_();
  auto [q2, k2, v2] = split(want_qkv);
  Tensor want = unfused_attention(q2, k2, v2, true, 0.25);
  want.backward(dout.to(DType::f64));
  EXPECT_TRUE(out.is_contiguous());
  EXPECT_TRUE(all_close(out.to(DType::f64), want, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(qkv.grad().to(DType::f64), want_qkv.grad(), 1e-5, 1e-5));
}

TEST(FlashAttention, GroupedQueryOfMegatronsFusedQkv) {
  // Megatron's linear_qkv output per kv group: its G query heads, then k, then
  // v. The query is a [B, T, Hkv, G, D] view (no [B, T, Hq, D] view exists).
  const int64_t B = 2, T = 21, Hkv = 2, G = 3, D = 8;
  for (DType dt : {DType::f32, DType::bf16}) {
    Generator g(15);
    Tensor qkv = randn({B, T, Hkv * (G + 2) * D}, {}, g).to(dt).detach().requires_grad_();
    Tensor dout = randn({B, T, Hkv * G, D}, {}, g);
    auto run_on = [&](const Tensor& x, bool flash) {
      Tensor grouped = x.view({B, T, Hkv, G + 2, D});
      Tensor q = grouped.narrow(3, 0, G), k = grouped.select(3, G), v = grouped.select(3, G + 1);
      if (flash) return flash_attention(q, k, v);
      return unfused_attention(q.reshape({B, T, Hkv * G, D}), k, v, true, 1.0 / std::sqrt(8.0));
    };
    Tensor out = run_on(qkv, true);
    EXPECT_EQ(out.shape(), (Shape{B, T, Hkv * G, D}));
    out.backward(dout.to(dt));
    Tensor ref_qkv = qkv.detach().to(DType::f64).requires_grad_();
    Tensor want = run_on(ref_qkv, false);
    want.backward(dout.to(DType::f64));
    const double tol = dt == DType::f32 ? 1e-5 : 3e-2;
    EXPECT_TRUE(all_close(out.to(DType::f64), want, tol, tol)) << dtype_name(dt);
    EXPECT_TRUE(all_close(qkv.grad().to(DType::f64), ref_qkv.grad(), tol, tol)) << dtype_name(dt);
  }
}

TEST(FlashAttention, Bf16AndF16) {
  // Reduced floats round the inputs to 8 (bf16) or 11 (f16) mantissa bits,
  // the output once more, and with AVX512-BF16 also P and dS (as
  // FlashAttention-2 does): compared with the f64 reference of the same
  // rounded inputs at 3e-2. Every SIMD variant (the bf16 dot products, the
  // f32 fallbacks) runs the bf16 case; odd D takes the f32 path everywhere.
  for (DType dt : {DType::bf16, DType::f16})
    for (const Shape4& s : {Shape4{1, 70, 70, 4, 2, 32}, Shape4{2, 33, 65, 2, 1, 7}}) {
      Inputs in = make_inputs(s, 5);
      for (Tensor* t : {&in.q, &in.k, &in.v, &in.dout}) *t = t->to(dt).to(DType::f32);
      const Grads want = reference(in, true, 1.0 / std::sqrt(static_cast<double>(s.D)));
      for (const std::string& isa : ops::flash_attention_cpu_variants()) {
        ops::set_flash_attention_cpu_variant(isa);
        const Grads got = run(in, dt, [](const Tensor& q, const Tensor& k, const Tensor& v) {
          return flash_attention(q, k, v);
        });
        EXPECT_EQ(got.dq.dtype(), dt);
        expect_close(got, want, 3e-2, 3e-2, name(s, true) + " " + dtype_name(dt) + " " + isa);
      }
      ops::set_flash_attention_cpu_variant("");
    }
}

TEST(FlashAttention, Bf16DropoutMatchesUnfused) {
  const Shape4 s{1, 67, 67, 4, 2, 16};
  Inputs in = make_inputs(s, 13);
  for (Tensor* t : {&in.q, &in.k, &in.v, &in.dout}) *t = t->to(DType::bf16).to(DType::f32);
  const Grads want = reference(in, true, 0.25, dropout_factors(s, 0.2, 9, 5));
  for (const std::string& isa : ops::flash_attention_cpu_variants()) {
    ops::set_flash_attention_cpu_variant(isa);
    Generator gen(9);
    gen.set_state(9, 5);
    const Grads got = run(in, DType::bf16, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
      return flash_attention(q, k, v, {.dropout_p = 0.2, .training = true, .generator = &gen});
    });
    expect_close(got, want, 3e-2, 3e-2, std::string("bf16 dropout ") + isa);
  }
  ops::set_flash_attention_cpu_variant("");
}

TEST(FlashAttention, ScaleOption) {
  const Shape4 s{1, 9, 9, 2, 2, 8};
  const Inputs in = make_inputs(s, 6);
  const Grads want = reference(in, true, 0.7);
  const Grads got = run(in, DType::f32, [](const Tensor& q, const Tensor& k, const Tensor& v) {
    return flash_attention(q, k, v, {.scale = 0.7});
  });
  expect_close(got, want, 1e-5, 1e-5, "scale 0.7");
}

TEST(FlashAttention, SplitAndWholeHeadSchedulesAgree) {
  // One (batch, kv head) pair makes the backward split its query blocks over
  // threads and sum partial dK/dV; eight pairs give each thread whole heads.
  const int prev = num_threads();
  for (const Shape4& s : {Shape4{1, 300, 300, 2, 1, 16}, Shape4{4, 130, 130, 2, 2, 16}}) {
    const Inputs in = make_inputs(s, 7);
    const Grads want = reference(in, true, 0.25);
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      const Grads got = run(in, DType::f32, [](const Tensor& q, const Tensor& k, const Tensor& v) {
        return flash_attention(q, k, v);
      });
      expect_close(got, want, 1e-5, 1e-5, name(s, true) + " threads " + std::to_string(threads));
    }
  }
  set_num_threads(prev);
}

TEST(FlashAttention, DropoutMatchesUnfusedWithTheSameMask) {
  const Shape4 s{2, 67, 67, 4, 2, 16};
  const double p = 0.3;
  const Inputs in = make_inputs(s, 8);
  Generator gen(1234);
  gen.set_state(1234, 77);
  const Tensor drop = dropout_factors(s, p, 1234, 77);
  const Grads want = reference(in, true, 0.25, drop);
  const Grads got = run(in, DType::f32, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
    return flash_attention(q, k, v, {.dropout_p = p, .training = true, .generator = &gen});
  });
  expect_close(got, want, 1e-5, 1e-5, "dropout");
  EXPECT_EQ(gen.offset(), 77 + ops::flash_attention_counters(s.B, s.Hq, s.T, s.S));
  // The mask keeps about 1 - p of the probabilities.
  const double kept = ne(drop, zeros_like(drop)).to(DType::f64).mean().item<double>();
  EXPECT_NEAR(kept, 1 - p, 0.02);
}

TEST(FlashAttention, DropoutOnlyWhenTraining) {
  const Shape4 s{1, 20, 20, 2, 2, 8};
  const Inputs in = make_inputs(s, 9);
  Generator gen(5);
  Tensor a = flash_attention(in.q, in.k, in.v, {.dropout_p = 0.5, .generator = &gen});
  EXPECT_EQ(gen.offset(), 0u);
  EXPECT_TRUE(all_close(a, flash_attention(in.q, in.k, in.v), 0, 0));
  Tensor b = flash_attention(in.q, in.k, in.v, {.dropout_p = 0.5, .training = true, .generator = &gen});
  Tensor c = flash_attention(in.q, in.k, in.v, {.dropout_p = 0.5, .training = true, .generator = &gen});
  EXPECT_FALSE(all_close(b, c, 1e-3, 1e-3));  // the stream advanced: a new mask
}

TEST(FlashAttention, GradcheckTiny) {
  for (bool causal : {true, false}) {
    Generator g(10);
    std::vector<Tensor> in = {randn({1, 5, 2, 4}, {}, g).requires_grad_(),
                              randn({1, 6, 1, 4}, {}, g).requires_grad_(),
                              randn({1, 6, 1, 4}, {}, g).requires_grad_()};
    Tensor probe = randn({1, 5, 2, 4}, {}, g);
    auto f = [&](const std::vector<Tensor>& x) {
      return sum(flash_attention(x[0], x[1], x[2], {.causal = causal}) * probe);
    };
    auto r = autograd::gradcheck(f, in, 1e-2, 2e-3, 2e-2);
    EXPECT_TRUE(r.ok) << (causal ? "causal: " : "full: ") << r.message;
  }
}

TEST(FlashAttention, GradcheckWithDropout) {
  // The same generator state in every evaluation: a fixed mask.
  Generator g(11);
  std::vector<Tensor> in = {randn({1, 6, 2, 4}, {}, g).requires_grad_(),
                            randn({1, 6, 2, 4}, {}, g).requires_grad_(),
                            randn({1, 6, 2, 4}, {}, g).requires_grad_()};
  Tensor probe = randn({1, 6, 2, 4}, {}, g);
  Generator drop_gen(3);
  auto f = [&](const std::vector<Tensor>& x) {
    drop_gen.set_state(3, 0);
    return sum(flash_attention(x[0], x[1], x[2],
                               {.dropout_p = 0.4, .training = true, .generator = &drop_gen}) *
               probe);
  };
  auto r = autograd::gradcheck(f, in, 1e-2, 2e-3, 2e-2);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(FlashAttention, AutocastRunsInTheLowDtype) {
  const Inputs in = make_inputs({1, 8, 8, 2, 2, 8}, 12);
  autocast::Guard amp(DType::bf16);
  Tensor out = flash_attention(in.q, in.k, in.v);
  EXPECT_EQ(out.dtype(), DType::bf16);
}

TEST(FlashAttention, MatchesTorchFixture) {
  // tests/fixtures/gen_attention.py: GQA, causal bottom-right with T < S.
  auto fx = test::load_fixture("flash_attention_gqa.json");
  auto f32 = [&](const char* key) { return fx.tensor(key).to(DType::f32); };
  Tensor q = f32("q").requires_grad_(), k = f32("k").requires_grad_(), v = f32("v").requires_grad_();
  Tensor out = flash_attention(q, k, v, {.scale = fx.scalar("scale")});
  out.backward(f32("dout"));
  EXPECT_TRUE(all_close(out, fx.tensor("out"), 1e-4, 1e-5));
  EXPECT_TRUE(all_close(q.grad(), fx.tensor("dq"), 1e-4, 1e-5));
  EXPECT_TRUE(all_close(k.grad(), fx.tensor("dk"), 1e-4, 1e-5));
  EXPECT_TRUE(all_close(v.grad(), fx.tensor("dv"), 1e-4, 1e-5));
}

TEST(FlashAttention, BadInputsAreClearErrors) {
  Tensor q = randn({1, 4, 4, 8}), k = randn({1, 4, 2, 8}), v = randn({1, 4, 2, 8});
  EXPECT_THROW(flash_attention(randn({4, 4, 8}), k, v), ValueError);        // not 4-d
  EXPECT_THROW(flash_attention(randn({1, 4, 3, 2, 8}), k, v), ValueError);  // grouped, 3 != 2
  EXPECT_THROW(flash_attention(q, randn({1, 4, 3, 8}), randn({1, 4, 3, 8})), ValueError);  // 4 % 3
  EXPECT_THROW(flash_attention(q, randn({1, 4, 2, 4}), randn({1, 4, 2, 4})), ValueError);  // D
  EXPECT_THROW(flash_attention(q, k, randn({1, 5, 2, 8})), ValueError);     // k vs v: S
  EXPECT_THROW(flash_attention(q, k, randn({1, 4, 1, 8})), ValueError);     // k vs v: Hkv
  EXPECT_THROW(flash_attention(q, randn({2, 4, 2, 8}), randn({2, 4, 2, 8})), ValueError);  // B
  EXPECT_THROW(flash_attention(q, k.to(DType::bf16), v), TypeError);        // mixed dtypes
  EXPECT_THROW(flash_attention(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64)), TypeError);
  EXPECT_THROW(flash_attention(q.to(DType::i64), k.to(DType::i64), v.to(DType::i64)), TypeError);
  EXPECT_THROW(flash_attention(q, k, v, {.dropout_p = 1.5, .training = true}), ValueError);
  try {
    flash_attention(q, randn({1, 4, 3, 8}), randn({1, 4, 3, 8}));
    FAIL() << "expected an error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of the key/value heads"), std::string::npos)
        << e.what();
  }
}

TEST(FlashAttention, EmptyShapes) {
  Tensor out = flash_attention(randn({2, 0, 2, 8}), randn({2, 5, 2, 8}), randn({2, 5, 2, 8}));
  EXPECT_EQ(out.shape(), (Shape{2, 0, 2, 8}));
  // No keys at all: zeros, as a row that sees no key.
  Tensor z = flash_attention(randn({1, 3, 2, 8}), randn({1, 0, 2, 8}), randn({1, 0, 2, 8}),
                             {.causal = false});
  EXPECT_EQ(abs(z).sum().item<double>(), 0.0);
}

}  // namespace
}  // namespace qk
