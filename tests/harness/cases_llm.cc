// The fused LLM ops (qk/tensor/ops/attention.h, llm.h; qk/autograd/llm_ops.h):
// flash attention (GQA, causal with T != S, a value head dim of its own, the
// grouped view of a fused QKV projection, dropout from a fixed generator),
// rotary embedding, SwiGLU and the output layer fused with cross entropy.
// Flash attention has no f64 kernel: its reference is the unfused
// composition in f64, with the dropout mask rebuilt from qk::philox4x32.
#include <cmath>

#include "harness/case_builders.h"
#include "qk/autograd/functions.h"
#include "qk/autograd/llm_ops.h"
#include "qk/tensor/ops/attention.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/llm.h"
#include "qk/tensor/ops/view.h"

namespace qk::harness {

namespace {

using V = std::vector<Tensor>;

constexpr uint64_t kAttentionSeed = 0xa77;

struct Attn {
  int64_t B, T, S, Hq, Hkv, D, Dv;
  bool causal;
  double dropout = 0;
  bool fused_qkv = false;              // q, k, v are views of one [B,T,Hkv,G+2,D] tensor
  Layout layout = Layout::contiguous;  // of q (transposed: [B,Hq,T,D] stored)
  std::string str() const {
    return label({str_cat("B", B, " T", T, " S", S, " Hq", Hq, " Hkv", Hkv, " D", D, " Dv", Dv),
                  causal ? "causal" : "", dropout > 0 ? str_cat("dropout=", dropout) : "",
                  fused_qkv ? "fused-qkv" : "", layout == Layout::transposed ? "qT" : ""});
  }
};

// The dropout mask flash attention documents (ops::FlashAttentionParams),
// [B, Hq, T, S], already scaled by 1 / (1 - p); offset 0 (a fresh generator).
Tensor attention_dropout_mask(const Attn& a, Device d) {
  const int64_t groups = (a.S + 3) / 4;
  const uint32_t keep_below = static_cast<uint32_t>((1.0 - a.dropout) * 16777216.0);
  std::vector<double> m(static_cast<size_t>(a.B * a.Hq * a.T * a.S));
  uint32_t w[4];
  size_t i = 0;
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.Hq; ++h)
      for (int64_t t = 0; t < a.T; ++t)
        for (int64_t s = 0; s < a.S; ++s, ++i) {
          philox4x32(kAttentionSeed,
                     static_cast<uint64_t>(((b * a.Hq + h) * a.T + t) * groups + s / 4), w);
          m[i] = (w[s % 4] >> 8) < keep_below ? 1.0 / (1.0 - a.dropout) : 0.0;
        }
  return ops::to_device(from_vector<double>(m, {a.B, a.Hq, a.T, a.S}), d);
}

// Unfused attention in q's dtype (f64 in the reference run): returns out
// [B,T,Hq,Dv] and lse [B,Hq,T] (-inf where a query sees no key).
std::pair<Tensor, Tensor> attention_reference(const Attn& a, Tensor q, const Tensor& k,
                                              const Tensor& v) {
  if (q.dim() == 5) q = q.reshape({a.B, a.T, a.Hq, a.D});
  const int64_t G = a.Hq / a.Hkv;
  auto heads = [&](const Tensor& t, int64_t d) {  // [B,S,Hkv,d] -> [B,Hq,S,d]
    return t.unsqueeze(3)
        .expand({a.B, a.S, a.Hkv, G, d})
        .reshape({a.B, a.S, a.Hq, d})
        .permute({0, 2, 1, 3});
  };
  const DType dt = q.dtype();
  Tensor scores = mul(matmul(q.permute({0, 2, 1, 3}), heads(k, a.D).transpose(2, 3)),
                      1.0 / std::sqrt(double(a.D)));
  // Visible: s <= t + (S - T) when causal; masked scores get a large finite
  // negative (not -inf), so that a row with no key stays finite.
  std::vector<uint8_t> vis(static_cast<size_t>(a.T * a.S));
  std::vector<double> row_any(static_cast<size_t>(a.T), 0.0);
  for (int64_t t = 0; t < a.T; ++t)
    for (int64_t s = 0; s < a.S; ++s) {
      const bool on = !a.causal || s <= t + (a.S - a.T);
      vis[t * a.S + s] = on;
      if (on) row_any[t] = 1.0;
    }
  const Device d = q.device();
  Tensor hidden = ops::to_device(
      ops::binary_scalar(BinaryOp::eq, from_vector<uint8_t>(vis, {a.T, a.S}), 0.0), d);
  Tensor any = ops::to_device(ops::cast(from_vector<double>(row_any, {a.T, 1}), dt), d);
  Tensor masked = masked_fill(scores, hidden, -1e30);
  Tensor probs = mul(softmax(masked, -1), any);
  // lse over the visible keys; log(0) = -inf where there are none.
  Tensor lse = log(sum(mul(exp(masked), any), {-1}));
  if (a.dropout > 0) probs = mul(probs, ops::cast(attention_dropout_mask(a, d), dt));
  Tensor out = matmul(probs, heads(v, a.Dv)).permute({0, 2, 1, 3});
  return {out, lse};
}

ops::FlashAttentionParams raw_params(const Attn& a) {
  ops::FlashAttentionParams p;
  p.causal = a.causal;
  p.dropout_p = a.dropout;
  p.seed = kAttentionSeed;
  return p;
}

std::vector<Tensor> qkv_of(const Attn& a, const V& in) {
  if (!a.fused_qkv) return {in[0], in[1], in[2]};
  const int64_t G = a.Hq / a.Hkv;
  return {in[0].narrow(3, 0, G), in[0].select(3, G), in[0].select(3, G + 1)};
}

void attentions(std::vector<Case>& out, Values& v) {
  const std::vector<Attn> attns = {
      {2, 7, 7, 4, 2, 8, 8, true},
      {1, 5, 9, 2, 2, 8, 8, false},
      {1, 9, 5, 2, 1, 8, 8, true},
      {2, 6, 6, 4, 1, 8, 6, true},
      {1, 1, 13, 4, 2, 16, 16, true},
      {2, 7, 7, 4, 2, 8, 8, true, 0, true},
      {1, 13, 13, 2, 2, 16, 16, false, 0, false, Layout::transposed},
      {2, 7, 11, 4, 2, 8, 8, true, 0.2},
      // More than one 64-row block of queries and keys, ragged at the end.
      {1, 130, 130, 2, 1, 64, 64, true},
      {1, 130, 70, 2, 2, 32, 32, false, 0.1},
      // The CUDA tensor-core kernels' heads (16-bit, D = Dv of 32, 64, 128):
      // grouped, fused, transposed, ragged tiles, queries that see no key.
      {1, 100, 150, 4, 2, 128, 128, true},
      {2, 70, 70, 4, 2, 64, 64, true, 0, true},
      {1, 150, 90, 2, 1, 64, 64, true, 0.1},
      {1, 65, 65, 2, 2, 32, 32, false, 0, false, Layout::transposed},
  };
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    Gen g = [&v, t](const Shape& s) { return v.uniform(s, t, -1, 1); };
    for (const Attn& a : attns) {
      auto inputs = [&](bool grad) {
        if (a.fused_qkv)
          return std::vector<Input>{
              laid_out({a.B, a.T, a.Hkv, a.Hq / a.Hkv + 2, a.D}, Layout::contiguous, g, grad)};
        Input q = a.layout == Layout::transposed
                      ? Input{g({a.B, a.Hq, a.T, a.D}),
                              {"T", [](const Tensor& x) { return x.transpose(1, 2); }},
                              grad}
                      : laid_out({a.B, a.T, a.Hq, a.D}, Layout::contiguous, g, grad);
        return std::vector<Input>{q, laid_out({a.B, a.S, a.Hkv, a.D}, Layout::contiguous, g, grad),
                                  laid_out({a.B, a.S, a.Hkv, a.Dv}, Layout::contiguous, g, grad)};
      };
      Case c;
      c.op = "flash_attention";
      c.covers = {"ops::flash_attention", "ops::flash_attention_backward"};
      c.shape = a.str();
      c.dtype = t;
      c.inputs = inputs(true);
      c.fn = [a](const V& in) {
        V qkv = qkv_of(a, in);
        Generator gen(kAttentionSeed);
        AttentionOptions o;
        o.causal = a.causal;
        o.dropout_p = a.dropout;
        o.training = a.dropout > 0;
        o.generator = &gen;
        return V{flash_attention(qkv[0], qkv[1], qkv[2], o)};
      };
      c.reference = [a](const V& in) {
        V qkv = qkv_of(a, in);
        return V{attention_reference(a, qkv[0], qkv[1], qkv[2]).first};
      };
      out.push_back(std::move(c));
      // The raw kernels: (out, lse) and the three gradients for a given dout.
      Case r;
      r.op = "ops::flash_attention_backward";
      r.covers = {"ops::flash_attention"};
      r.shape = a.str();
      r.dtype = t;
      r.inputs = inputs(false);
      r.inputs.push_back(laid_out({a.B, a.T, a.Hq, a.Dv}, Layout::contiguous, g, false));
      r.fn = [a](const V& in) {
        V qkv = qkv_of(a, in);
        const ops::FlashAttentionParams p = raw_params(a);
        auto f = ops::flash_attention(qkv[0], qkv[1], qkv[2], p);
        auto [dq, dk, dv] =
            ops::flash_attention_backward(in.back(), qkv[0], qkv[1], qkv[2], f.out, f.lse, p);
        return V{f.out, f.lse, dq, dk, dv};
      };
      r.reference = [a](const V& in) {
        EnableGradGuard on;
        V qkv = qkv_of(a, in);
        V leaves;
        for (const Tensor& x : qkv) leaves.push_back(x.detach().requires_grad_());
        auto [o, lse] = attention_reference(a, leaves[0], leaves[1], leaves[2]);
        V grads = autograd::grad({o}, leaves, {in.back()});
        return V{o.detach(), lse.detach(), grads[0], grads[1], grads[2]};
      };
      out.push_back(std::move(r));
    }
  }
}

// Megatron's rotary angles: position t, frequency i of R/2, laid out twice.
std::pair<Tensor, Tensor> rotary_tables(int64_t T, int64_t R) {
  std::vector<float> c(static_cast<size_t>(T * R)), s(static_cast<size_t>(T * R));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < R; ++i) {
      const double f =
          1.0 / std::pow(10000.0, 2.0 * static_cast<double>(i % (R / 2)) / static_cast<double>(R));
      c[t * R + i] = static_cast<float>(std::cos(static_cast<double>(t) * f));
      s[t * R + i] = static_cast<float>(std::sin(static_cast<double>(t) * f));
    }
  return {from_vector<float>(c, {T, R}), from_vector<float>(s, {T, R})};
}

void rotaries(std::vector<Case>& out, Values& v) {
  struct Rot {
    Shape x;  // [B,T,H,D]
    int64_t R;
    int layout;  // 0 contiguous, 1 a head slice of a fused [B,T,3H,D], 2 stored [B,H,T,D]
  };
  const std::vector<Rot> rots = {
      {{2, 7, 3, 8}, 8, 0}, {{2, 7, 3, 8}, 4, 1}, {{1, 13, 2, 16}, 16, 2}, {{1, 0, 2, 8}, 8, 0}};
  for (DType t : kFloating) {
    Gen g = [&v, t](const Shape& s) { return v.data(s, t); };
    for (const Rot& rt : rots) {
      const Shape& x = rt.x;
      auto [cos, sin] = rotary_tables(x[1], rt.R);
      Input in;
      if (rt.layout == 1) {
        in = data(g({x[0], x[1], 3 * x[2], x[3]}));
        const int64_t H = x[2];
        in.view = {"qkv-slice", [H](const Tensor& a) { return a.narrow(2, H, H); }};
      } else if (rt.layout == 2) {
        in = data(g({x[0], x[2], x[1], x[3]}));
        in.view = {"T", [](const Tensor& a) { return a.transpose(1, 2); }};
      } else {
        in = data(g(x));
      }
      const std::string sh = label({shape_label(x), str_cat("R=", rt.R), in.view.label});
      for (bool autograd : {true, false}) {
        Input xi = in;
        xi.grad = autograd;
        Case c;
        c.op = autograd ? "rotary_embedding" : "ops::rotary_embedding";
        if (autograd) c.covers = {"ops::rotary_embedding_backward"};
        c.shape = sh;
        c.dtype = t;
        c.inputs = {xi, fixed(cos), fixed(sin)};
        c.fn = [autograd](const V& a) {
          return V{autograd ? rotary_embedding(a[0], a[1], a[2])
                            : ops::rotary_embedding(a[0], a[1], a[2])};
        };
        out.push_back(std::move(c));
      }
      Case b;
      b.op = "ops::rotary_embedding_backward";
      b.shape = sh;
      b.dtype = t;
      b.inputs = {in, fixed(cos), fixed(sin)};
      b.inputs[0].grad = false;
      b.fn = [](const V& a) { return V{ops::rotary_embedding_backward(a[0], a[1], a[2])}; };
      out.push_back(std::move(b));
    }
  }
}

void swiglus(std::vector<Case>& out, Values& v) {
  const std::vector<std::pair<Shape, Layout>> shapes = {{{7, 26}, Layout::contiguous},
                                                        {{7, 26}, Layout::transposed},
                                                        {{2, 3, 2062}, Layout::contiguous},
                                                        {{0, 8}, Layout::contiguous},
                                                        {{5, 26}, Layout::sliced}};
  for (DType t : kFloating) {
    Gen g = [&v, t](const Shape& s) { return v.data(s, t); };
    for (const auto& [shape, layout] : shapes) {
      Shape half = shape;
      half.back() /= 2;
      const std::string sh = shape_label(shape, layout);
      Case c;
      c.op = "swiglu";
      c.covers = {"ops::swiglu_backward"};
      c.shape = sh;
      c.dtype = t;
      c.inputs = {laid_out(shape, layout, g)};
      c.fn = [](const V& a) { return V{swiglu(a[0])}; };
      out.push_back(c);
      c.op = "ops::swiglu";
      c.covers = {};
      c.inputs[0].grad = false;
      c.fn = [](const V& a) { return V{ops::swiglu(a[0])}; };
      out.push_back(c);
      c.op = "ops::swiglu_backward";
      c.inputs.push_back(laid_out(half, Layout::contiguous, g, false));
      c.fn = [](const V& a) { return V{ops::swiglu_backward(a[1], a[0])}; };
      out.push_back(c);
    }
  }
}

Tensor lce_targets(Values& v, int64_t n, int64_t vocab, DType it) {
  std::vector<int64_t> t = v.index({n}, vocab).to_vector<int64_t>();
  if (n > 2) t[2] = -100;
  return ops::cast(from_vector<int64_t>(t, {n}), it);
}

void linear_cross_entropies(std::vector<Case>& out, Values& v) {
  struct Lce {
    int64_t N, C, V;
    Layout lh;
    bool token_weight;
    DType it;
  };
  const std::vector<Lce> lces = {{7, 13, 11, Layout::contiguous, false, DType::i64},
                                 {7, 13, 11, Layout::transposed, true, DType::i32},
                                 {1031, 8, 13, Layout::contiguous, true, DType::i64},
                                 {0, 8, 5, Layout::contiguous, false, DType::i64}};
  for (DType t : kFloating) {
    Gen g = [&v, t](const Shape& s) { return v.uniform(s, t, -1, 1); };
    Gen pos = [&v, t](const Shape& s) { return v.positive(s, t); };
    for (const Lce& l : lces) {
      const std::string sh =
          label({str_cat("N", l.N, " C", l.C, " V", l.V), shape_label({l.N, l.C}, l.lh),
                 dtype_name(l.it), l.token_weight ? "token-weight" : ""});
      std::vector<Input> in = {
          laid_out({l.N, l.C}, l.lh, g), laid_out({l.V, l.C}, Layout::sliced, g),
          index(lce_targets(v, l.N, l.V, l.it)), l.token_weight ? data(pos({l.N}), false) : none()};
      Case c;
      c.op = "linear_cross_entropy";
      c.shape = sh;
      c.dtype = t;
      c.inputs = in;
      c.fn = [](const V& a) { return V{linear_cross_entropy(a[0], a[1], a[2], a[3])}; };
      // The unfused composition: per-row cross entropy of the full logits.
      c.reference = [](const V& a) {
        Tensor per = cross_entropy(linear(a[0], a[1]), ops::cast(a[2], DType::i64), -100, 0.0,
                                   Reduction::none);
        return V{a[3].defined() ? sum(mul(per, a[3])) : sum(per)};
      };
      out.push_back(c);
      if (t == DType::f16) continue;  // the raw kernel takes f32, bf16, f64
      Case r;
      r.op = "ops::linear_cross_entropy";
      r.shape = label({sh, "chunk_rows=3"});
      r.dtype = t;
      r.inputs = in;
      for (Input& i : r.inputs) i.grad = false;
      r.fn = [](const V& a) {
        ops::LinearCrossEntropyOptions o;
        o.grad_hidden = o.grad_weight = true;
        o.chunk_rows = 3;
        auto res = ops::linear_cross_entropy(a[0], a[1], a[2], a[3], o);
        return V{res.loss, res.grad_hidden, res.grad_weight};
      };
      out.push_back(std::move(r));
    }
  }
}

}  // namespace

void add_llm_cases(std::vector<Case>& out) {
  Values v(909);
  attentions(out, v);
  rotaries(out, v);
  swiglus(out, v);
  linear_cross_entropies(out, v);
}

}  // namespace qk::harness
