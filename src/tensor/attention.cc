// Raw flash attention: validation, then the device's kernel.
#include "qk/tensor/ops/attention.h"

#include <cmath>

#include "cpu/flash_attention.h"
#include "cpu/flash_attention_simd.h"
#include "qk/tensor/ops/view.h"

namespace qk::ops {

QK_DEFINE_KERNEL(flash_attention_fwd_kernel, FlashAttentionFwdFn);
QK_DEFINE_KERNEL(flash_attention_bwd_kernel, FlashAttentionBwdFn);
QK_REGISTER_KERNEL(flash_attention_fwd_kernel, cpu, cpu::flash_attention_forward);
QK_REGISTER_KERNEL(flash_attention_bwd_kernel, cpu, cpu::flash_attention_backward);

namespace {

// Kernels read rows of D contiguous elements at any outer strides.
Tensor last_dim_contiguous(const Tensor& t) {
  return t.size(-1) <= 1 || t.stride(-1) == 1 ? t : contiguous(t);
}

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, FlashAttentionParams& p,
                  const char* op) {
  QK_CHECK(q.defined() && k.defined() && v.defined(), op, ": q, k and v must be defined tensors");
  QK_CHECK((q.dim() == 4 || q.dim() == 5) && k.dim() == 4 && v.dim() == 4, op,
           ": expected q [B, T, Hq, D] (or [B, T, Hkv, G, D]), k [B, S, Hkv, D] and v [B, S, Hkv, Dv], got q ",
           shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()));
  const DType dt = q.dtype();
  QK_CHECK_TYPE(dt == DType::f32 || dt == DType::bf16 || dt == DType::f16, op,
                ": expected f32, bf16 or f16 inputs, got ", dtype_name(dt),
                " (cast with .to(DType::f32))");
  QK_CHECK_TYPE(k.dtype() == dt && v.dtype() == dt, op, ": q, k and v must share one dtype, got ",
                dtype_name(dt), ", ", dtype_name(k.dtype()), " and ", dtype_name(v.dtype()));
  QK_CHECK_DEVICE(k.device() == q.device() && v.device() == q.device(), op,
                  ": q, k and v must be on one device, got ", q.device().str(), ", ",
                  k.device().str(), " and ", v.device().str());
  QK_CHECK(k.size(0) == v.size(0) && k.size(1) == v.size(1) && k.size(2) == v.size(2), op,
           ": k [B, S, Hkv, D] and v [B, S, Hkv, Dv] must agree in B, S and Hkv, got k ", shape_str(k.shape()),
           " and v ", shape_str(v.shape()));
  QK_CHECK(k.size(0) == q.size(0) && k.size(3) == q.size(-1), op,
           ": batch and head dim of k/v ", shape_str(k.shape()), " must match q ",
           shape_str(q.shape()), " ([B, T, Hq, D] vs [B, S, Hkv, D])");
  const int64_t hq = attention_query_heads(q), hkv = k.size(2);
  if (q.dim() == 5)
    QK_CHECK(q.size(2) == hkv, op, ": a grouped q [B, T, Hkv, G, D] ", shape_str(q.shape()),
             " must have k's ", hkv, " kv heads in dim 2");
  QK_CHECK(hkv >= 1 && hq % hkv == 0, op, ": the query heads (", hq,
           ") must be a multiple of the key/value heads (", hkv, ") for grouped-query attention");
  QK_CHECK(q.size(1) < (int64_t{1} << 31) && k.size(1) < (int64_t{1} << 31), op,
           ": sequence lengths must be below 2^31, got T = ", q.size(1), ", S = ", k.size(1));
  const int64_t D = q.size(-1);
  if (p.scale == 0) p.scale = D > 0 ? 1.0 / std::sqrt(static_cast<double>(D)) : 1.0;
  QK_CHECK(std::isfinite(p.scale), op, ": scale must be finite, got ", p.scale);
  QK_CHECK(p.dropout_p >= 0 && p.dropout_p <= 1, op, ": dropout_p must be in [0, 1], got ",
           p.dropout_p);
}

}  // namespace

int64_t attention_query_heads(const Tensor& q) {
  return q.dim() == 5 ? q.size(2) * q.size(3) : q.size(2);
}

uint64_t flash_attention_counters(int64_t B, int64_t Hq, int64_t T, int64_t S) {
  return static_cast<uint64_t>(B) * static_cast<uint64_t>(Hq) * static_cast<uint64_t>(T) *
         static_cast<uint64_t>((S + 3) / 4);
}

FlashAttentionResult flash_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const FlashAttentionParams& params) {
  FlashAttentionParams p = params;
  check_inputs(q, k, v, p, "flash_attention");
  return flash_attention_fwd_kernel.get(q.device())(last_dim_contiguous(q), last_dim_contiguous(k),
                                                    last_dim_contiguous(v), p);
}

std::tuple<Tensor, Tensor, Tensor> flash_attention_backward(const Tensor& dout, const Tensor& q,
                                                            const Tensor& k, const Tensor& v,
                                                            const Tensor& out, const Tensor& lse,
                                                            const FlashAttentionParams& params) {
  FlashAttentionParams p = params;
  const char* op = "flash_attention_backward";
  check_inputs(q, k, v, p, op);
  QK_CHECK(dout.defined() && out.defined() && lse.defined(), op,
           ": dout, out and lse must be defined tensors");
  const int64_t hq = attention_query_heads(q);
  const Shape out_shape{q.size(0), q.size(1), hq, v.size(-1)};
  QK_CHECK(dout.shape() == out_shape && out.shape() == out_shape, op,
           ": dout and out must have the output's shape ", shape_str(out_shape), ", got ",
           shape_str(dout.shape()), " and ", shape_str(out.shape()));
  const Shape lse_shape{q.size(0), hq, q.size(1)};
  QK_CHECK(lse.shape() == lse_shape && lse.dtype() == DType::f32, op, ": expected lse f32 ",
           shape_str(lse_shape), " from the forward, got ", dtype_name(lse.dtype()), " ",
           shape_str(lse.shape()));
  QK_CHECK_DEVICE(dout.device() == q.device() && out.device() == q.device() &&
                      lse.device() == q.device(),
                  op, ": dout, out and lse must be on q's device ", q.device().str());
  const Tensor g = dout.dtype() == q.dtype() ? dout : cast(dout, q.dtype());
  const Tensor o = out.dtype() == q.dtype() ? out : cast(out, q.dtype());
  return flash_attention_bwd_kernel.get(q.device())(
      last_dim_contiguous(g), last_dim_contiguous(q), last_dim_contiguous(k),
      last_dim_contiguous(v), last_dim_contiguous(o), lse.is_contiguous() ? lse : contiguous(lse),
      p);
}

std::vector<std::string> flash_attention_cpu_variants() {
  std::vector<std::string> names;
  for (const cpu::flash::Leaves* l : cpu::flash::available_leaves()) names.emplace_back(l->isa);
  return names;
}

void set_flash_attention_cpu_variant(const std::string& name) {
  if (name.empty()) return cpu::flash::set_leaves_for_testing(nullptr);
  std::string known;
  for (const cpu::flash::Leaves* l : cpu::flash::available_leaves()) {
    if (name == l->isa) return cpu::flash::set_leaves_for_testing(l);
    known += known.empty() ? l->isa : std::string(", ") + l->isa;
  }
  QK_THROW(ValueError, "set_flash_attention_cpu_variant: '", name, "' is not a variant this CPU runs (", known, ")");
}

}  // namespace qk::ops
