// The LLM layers' kernels on a GPU against the CPU: layer and RMS norm
// (forward and backward, with and without weight and bias, odd and empty
// shapes), embedding (padding_idx, an index out of range, any weight dtype),
// rotary embedding (R < D, a sliced QKV input) and SwiGLU, in f32, f64, bf16
// and f16; the weight and embedding gradients repeat bit for bit. Skipped
// without a CUDA device (they run in scripts/device-check.sh on the GPU
// machine).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/device_compare.h"
#include "qk/base/error.h"
#include "qk/tensor/cuda.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/llm.h"
#include "qk/tensor/ops/nn.h"
#include "qk/tensor/ops/norm.h"
#include "qk/tensor/ops/view.h"

namespace qk {
namespace {

const Device kCuda0("cuda:0");

using devtest::max_abs_diff;

class CudaLlmOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  }
};

const DType kFloats[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

Tensor dev(const Tensor& t) { return t.defined() ? ops::to_device(t, kCuda0) : Tensor(); }
Tensor rnd(const Shape& s, DType t, double scale = 1.0) {
  Tensor x = randn(s, DType::f64);
  if (scale != 1.0) x = ops::binary_scalar(BinaryOp::mul, x, scale);
  return ops::cast(x, t);
}

// Relative to the CPU result's largest magnitude: the two sum in different
// orders, so a 16-bit result may round one unit apart.
double tol_of(DType t) {
  switch (t) {
    case DType::f64: return 1e-10;
    case DType::f32: return 2e-5;
    case DType::f16: return 4e-3;
    default: return 3e-2;  // bf16
  }
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : ops::cast(ops::to_device(t, kCPU), DType::f64).to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

// The GPU result `g` has the CPU result's shape, dtype and (within tol) values.
void expect_close(const Tensor& c, const Tensor& g, const std::string& what, double tol = -1) {
  ASSERT_EQ(c.defined(), g.defined()) << what;
  if (!c.defined()) return;
  EXPECT_EQ(shape_str(c.shape()), shape_str(g.shape())) << what;
  EXPECT_EQ(dtype_name(c.dtype()), dtype_name(g.dtype())) << what;
  EXPECT_EQ(g.device(), kCuda0) << what;
  if (tol < 0) tol = tol_of(c.dtype());
  EXPECT_LE(max_abs_diff(c, g), tol * (1 + max_abs(c))) << what;
}

std::vector<double> values(const Tensor& t) {
  return ops::cast(ops::to_device(t, kCPU), DType::f64).to_vector<double>();
}

struct NormCase {
  Shape x, n;
};
const NormCase kNormCases[] = {
    {{0, 7}, {7}},        {{5, 1}, {1}},          {{3, 7}, {7}},       {{4, 1031}, {1031}},
    {{2, 3, 4, 5}, {4, 5}}, {{300, 64}, {64}},      {{3, 2500}, {2500}}, {{2, 9000}, {9000}},
    {{0, 3, 5}, {3, 5}},
};

// Parameters: none, weight and bias, weight only, bias only (layer norm).
struct Params {
  bool weight, bias;
};
const Params kParams[] = {{false, false}, {true, true}, {true, false}, {false, true}};

TEST_F(CudaLlmOps, LayerNormMatchesTheCpu) {
  for (const NormCase& nc : kNormCases)
    for (DType t : kFloats)
      for (const Params& p : kParams)
        for (bool f32_params : {false, true}) {
          if (f32_params && t == DType::f32) continue;
          SCOPED_TRACE(shape_str(nc.x) + " " + dtype_name(t) + (p.weight ? " w" : "") + (p.bias ? " b" : "") +
                       (f32_params ? " f32 params" : ""));
          const DType pt = f32_params ? DType::f32 : t;
          Tensor x = rnd(nc.x, t, 3.0), gy = rnd(nc.x, t);
          Tensor w = p.weight ? rnd(nc.n, pt) : Tensor(), b = p.bias ? rnd(nc.n, pt) : Tensor();
          auto [yc, mc, rc] = ops::layer_norm(x, nc.n, w, b, 1e-5);
          auto [yg, mg, rg] = ops::layer_norm(dev(x), nc.n, dev(w), dev(b), 1e-5);
          expect_close(yc, yg, "out");
          expect_close(mc, mg, "mean");
          expect_close(rc, rg, "rstd");
          auto [dxc, dwc, dbc] = ops::layer_norm_backward(gy, x, nc.n, mc, rc, w);
          auto [dxg, dwg, dbg] = ops::layer_norm_backward(dev(gy), dev(x), nc.n, mg, rg, dev(w));
          expect_close(dxc, dxg, "dx");
          expect_close(dwc, dwg, "dweight");
          expect_close(dbc, dbg, "dbias");
        }
}

TEST_F(CudaLlmOps, RmsNormMatchesTheCpu) {
  for (const NormCase& nc : kNormCases)
    for (DType t : kFloats)
      for (bool weight : {false, true})
        for (bool f32_params : {false, true}) {
          if (f32_params && (t == DType::f32 || !weight)) continue;
          SCOPED_TRACE(shape_str(nc.x) + " " + dtype_name(t) + (weight ? " w" : "") +
                       (f32_params ? " f32 params" : ""));
          Tensor x = rnd(nc.x, t, 3.0), gy = rnd(nc.x, t);
          Tensor w = weight ? rnd(nc.n, f32_params ? DType::f32 : t) : Tensor();
          auto [yc, rc] = ops::rms_norm(x, nc.n, w, 1e-6);
          auto [yg, rg] = ops::rms_norm(dev(x), nc.n, dev(w), 1e-6);
          expect_close(yc, yg, "out");
          expect_close(rc, rg, "rstd");
          auto [dxc, dwc] = ops::rms_norm_backward(gy, x, nc.n, rc, w);
          auto [dxg, dwg] = ops::rms_norm_backward(dev(gy), dev(x), nc.n, rg, dev(w));
          expect_close(dxc, dxg, "dx");
          expect_close(dwc, dwg, "dweight");
        }
}

TEST_F(CudaLlmOps, NormWeightGradientsRepeatBitForBit) {
  Tensor x = dev(rnd({777, 1031}, DType::f32)), gy = dev(rnd({777, 1031}, DType::f32));
  Tensor w = dev(rnd({1031}, DType::f32)), b = dev(rnd({1031}, DType::f32));
  auto [y, mean, rstd] = ops::layer_norm(x, {1031}, w, b, 1e-5);
  auto first = ops::layer_norm_backward(gy, x, {1031}, mean, rstd, w);
  auto second = ops::layer_norm_backward(gy, x, {1031}, mean, rstd, w);
  EXPECT_EQ(values(std::get<0>(first)), values(std::get<0>(second)));
  EXPECT_EQ(values(std::get<1>(first)), values(std::get<1>(second)));
  EXPECT_EQ(values(std::get<2>(first)), values(std::get<2>(second)));
  auto [yr, rs] = ops::rms_norm(x, {1031}, w, 1e-6);
  EXPECT_EQ(values(ops::rms_norm_backward(gy, x, {1031}, rs, w).second),
            values(ops::rms_norm_backward(gy, x, {1031}, rs, w).second));
}

TEST_F(CudaLlmOps, EmbeddingMatchesTheCpu) {
  const int64_t V = 9;
  const std::vector<int64_t> idx = {0, 3, 8, 3, 2, 2, 7, 3, 1, 0, 5, 3, 8, 2, 4};
  for (int64_t D : {1, 7, 8, 1031})
    for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::u8})
      for (DType it : {DType::i64, DType::i32}) {
        SCOPED_TRACE("D " + std::to_string(D) + " " + dtype_name(t) + " indices " + dtype_name(it));
        Tensor w = is_floating(t) ? rnd({V, D}, t, 10.0) : ops::cast(randint(0, 200, {V, D}), t);
        Tensor ind = ops::cast(from_vector<int64_t>(idx, {3, 5}), it);
        Tensor yc = ops::embedding(w, ind), yg = ops::embedding(dev(w), dev(ind));
        expect_close(yc, yg, "forward", 0.0);
        // A weight view starting off its allocation's alignment: narrower copies.
        Tensor ws = ops::slice(dev(w), 0, 1, V);
        Tensor ind1 = ops::cast(from_vector<int64_t>({0, 7, 3}, {3}), it);
        expect_close(ops::embedding(ops::slice(w, 0, 1, V), ind1), ops::embedding(ws, dev(ind1)), "offset", 0.0);
        if (!is_floating(t)) continue;
        Tensor gy = rnd({3, 5, D}, t);
        for (int64_t pad : {-1, 3, 8}) {
          SCOPED_TRACE("padding_idx " + std::to_string(pad));
          // Summed in the CPU's order (positions ascending, f32 for 16-bit): equal bits.
          expect_close(ops::embedding_backward(gy, ind, V, pad),
                       ops::embedding_backward(dev(gy), dev(ind), V, pad), "backward", 0.0);
        }
      }
}

TEST_F(CudaLlmOps, EmbeddingEdgeCases) {
  // No indices: [0, D] and [2, 0, D]; the backward gives zeros.
  for (const Shape& s : {Shape{0}, Shape{2, 0}}) {
    Tensor ind = zeros(s, DType::i64);
    Tensor w = rnd({4, 6}, DType::f32);
    expect_close(ops::embedding(w, ind), ops::embedding(dev(w), dev(ind)), "empty forward", 0.0);
    Shape gs = s;
    gs.push_back(6);
    Tensor gy = rnd(gs, DType::f32);
    expect_close(ops::embedding_backward(gy, ind, 4, -1), ops::embedding_backward(dev(gy), dev(ind), 4, -1),
                 "empty backward", 0.0);
  }
  // A 0-d index; one frequent row in bf16 (the f32 sum stalls in bf16 on the CPU's side too).
  Tensor w = rnd({5, 16}, DType::bf16);
  Tensor i0 = scalar_tensor(3, DType::i64);
  expect_close(ops::embedding(w, i0), ops::embedding(dev(w), dev(i0)), "0-d index", 0.0);
  std::vector<int64_t> hot(3000, 2);
  for (size_t i = 0; i < hot.size(); i += 7) hot[i] = static_cast<int64_t>(i % 5);
  Tensor ih = from_vector<int64_t>(hot, {3000});
  Tensor gh = rnd({3000, 16}, DType::bf16);
  Tensor dwg = ops::embedding_backward(dev(gh), dev(ih), 5, 4);
  expect_close(ops::embedding_backward(gh, ih, 5, 4), dwg, "hot row", 0.0);
  EXPECT_EQ(values(dwg), values(ops::embedding_backward(dev(gh), dev(ih), 5, 4))) << "repeats";
}

TEST_F(CudaLlmOps, EmbeddingIndexOutOfRangeRaisesTheCpusError) {
  auto message = [](const Tensor& w, const Tensor& ind) -> std::string {
    try {
      ops::embedding(w, ind);
    } catch (const IndexError& e) {
      return e.message();
    }
    return "no IndexError";
  };
  Tensor w = rnd({9, 7}, DType::f32);
  for (DType it : {DType::i64, DType::i32})
    for (const std::vector<int64_t>& idx : {std::vector<int64_t>{0, 4, 8, 9, 1, 12}, std::vector<int64_t>{2, -1, 3, 9}}) {
      Tensor ind = ops::cast(from_vector<int64_t>(idx, {static_cast<int64_t>(idx.size())}), it);
      const std::string want = message(w, ind);
      EXPECT_NE(want.find("embedding: index"), std::string::npos) << want;
      EXPECT_EQ(message(dev(w), dev(ind)), want);
    }
  // Rows of no bytes are checked all the same.
  Tensor w0 = zeros({3, 0}), bad = from_vector<int64_t>({0, 3}, {2});
  EXPECT_EQ(message(dev(w0), dev(bad)), message(w0, bad));
  // The device is fine afterwards.
  Tensor ok = from_vector<int64_t>({1, 2}, {2});
  expect_close(ops::embedding(w, ok), ops::embedding(dev(w), dev(ok)), "after the error", 0.0);
}

TEST_F(CudaLlmOps, RotaryEmbeddingMatchesTheCpu) {
  const int64_t B = 2, T = 5, H = 3;
  struct Dims {
    int64_t D, R;
  };
  for (Dims d : {Dims{8, 8}, Dims{7, 4}, Dims{64, 32}, Dims{6, 0}, Dims{1, 0}})
    for (DType t : kFloats) {
      SCOPED_TRACE("D " + std::to_string(d.D) + " R " + std::to_string(d.R) + " " + dtype_name(t));
      const DType ct = t == DType::f64 ? DType::f64 : DType::f32;
      Tensor cos = rnd({T, d.R}, ct), sin = rnd({T, d.R}, ct);
      Tensor cg = dev(cos), sg = dev(sin);
      // Contiguous.
      Tensor x = rnd({B, T, H, d.D}, t);
      expect_close(ops::rotary_embedding(x, cos, sin), ops::rotary_embedding(dev(x), cg, sg), "forward");
      expect_close(ops::rotary_embedding_backward(x, cos, sin), ops::rotary_embedding_backward(dev(x), cg, sg),
                   "backward");
      // K of a fused QKV projection [B, T, 3 H D]: strides (3 T H D, 3 H D, D, 1).
      Tensor qkv = rnd({B, T, 3 * H * d.D}, t), qkv_g = dev(qkv);
      auto k_of = [&](const Tensor& a) { return ops::select(ops::reshape(a, {B, T, 3, H, d.D}), 2, 1); };
      Tensor kc = k_of(qkv), kg = k_of(qkv_g);
      EXPECT_FALSE(kg.is_contiguous());
      expect_close(ops::rotary_embedding(kc, cos, sin), ops::rotary_embedding(kg, cg, sg), "sliced forward");
      expect_close(ops::rotary_embedding_backward(kc, cos, sin), ops::rotary_embedding_backward(kg, cg, sg),
                   "sliced backward");
      // Heads before positions in memory: [B, H, T, D] viewed as [B, T, H, D].
      Tensor bhtd = rnd({B, H, T, d.D}, t);
      Tensor pc = ops::permute(bhtd, {0, 2, 1, 3}), pg = ops::permute(dev(bhtd), {0, 2, 1, 3});
      expect_close(ops::rotary_embedding(pc, cos, sin), ops::rotary_embedding(pg, cg, sg), "permuted forward");
    }
  // No rows.
  Tensor cos = rnd({0, 4}, DType::f32), x = rnd({2, 0, 3, 4}, DType::f32);
  expect_close(ops::rotary_embedding(x, cos, cos), ops::rotary_embedding(dev(x), dev(cos), dev(cos)), "empty");
}

TEST_F(CudaLlmOps, SwigluMatchesTheCpu) {
  for (const Shape& s : {Shape{0, 14}, Shape{3, 2}, Shape{2, 3, 14}, Shape{4, 2062}, Shape{2}})
    for (DType t : kFloats)
      for (double scale : {1.0, 30.0}) {  // 30: sigmoid saturates at both ends
        SCOPED_TRACE(shape_str(s) + " " + dtype_name(t) + " scale " + std::to_string(scale));
        Tensor x = rnd(s, t, scale);
        Shape gs = s;
        gs.back() /= 2;
        Tensor gy = rnd(gs, t);
        expect_close(ops::swiglu(x), ops::swiglu(dev(x)), "forward");
        expect_close(ops::swiglu_backward(gy, x), ops::swiglu_backward(dev(gy), dev(x)), "backward");
      }
}

}  // namespace
}  // namespace qk
