// The CUDA backend's flash-attention kernel-table entries: the shapes and
// strides of the front's tensors (last dim contiguous, scale resolved) as an
// AttentionShape, outputs from the caching allocator, kernels on the
// current stream. Three implementations, the first that takes a call runs
// it: cuDNN's fused attention (attention_cudnn.cc, where cuDNN is built in),
// qk's tensor-core kernels (attention_tiled.cu), the simple ones
// (attention.cu) for everything else.
#include <cmath>
#include <string>

#include "attention_kernels.h"
#include "stream_handle.h"
#include "qk/base/env.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/attention.h"
#include "attention_cudnn.h"

namespace qk::cuda {

namespace {

QK_ENV_STRING(env_attention, "QK_CUDA_ATTENTION", "auto",
              "Which CUDA flash-attention kernels run: auto (cuDNN's fused attention where it takes the call: "
              "f16/bf16, no dropout, a shape this cuDNN and GPU support; else qk's tensor-core kernels where they "
              "fit: f16/bf16, one head dim of 32, 64 or 128, rows 16-byte aligned; else the simple ones), cudnn "
              "(cuDNN's, an error where it does not take the call), tiled (qk's tensor-core kernels where they "
              "fit, else the simple ones), simple (the simple ones everywhere). For comparisons.");

enum class AttentionPath { automatic, cudnn, tiled, simple };

AttentionPath attention_path() {
  static const AttentionPath path = [] {
    const std::string s = env_attention.get();
    if (s == "auto") return AttentionPath::automatic;
    if (s == "cudnn") return AttentionPath::cudnn;
    if (s == "tiled") return AttentionPath::tiled;
    QK_CHECK(s == "simple", "QK_CUDA_ATTENTION=", s, ": expected auto, cudnn, tiled or simple");
    return AttentionPath::simple;
  }();
  return path;
}

// Runs `cudnn` (true when cuDNN took the call) where the path allows it;
// false leaves the call to qk's kernels.
template <typename Cudnn>
bool by_cudnn(Cudnn&& cudnn, const char* what) {
  const AttentionPath path = attention_path();
  if (path != AttentionPath::automatic && path != AttentionPath::cudnn) return false;
  std::string why;
  if (cudnn(&why)) return true;
  QK_CHECK(path != AttentionPath::cudnn, "QK_CUDA_ATTENTION=cudnn: cuDNN's fused attention does not take this ",
           what, ": ", why);
  return false;
}

// Whether the tensor-core kernels take this call (attention_tiled.cu).
bool use_tiled(const AttentionShape& a, DType t, std::initializer_list<const void*> ptrs) {
  return attention_path() != AttentionPath::simple && tiled_attention_fits(a, static_cast<int>(t), ptrs);
}

TensorOptions on(const Tensor& like, DType t) { return TensorOptions().dtype(t).device(like.device()); }

AttentionShape shape_of(const Tensor& q, const Tensor& k, const Tensor& v, const ops::FlashAttentionParams& p) {
  AttentionShape a;
  a.B = q.size(0);
  a.T = q.size(1);
  a.S = k.size(1);
  a.Hq = ops::attention_query_heads(q);
  a.Hkv = k.size(2);
  a.D = q.size(-1);
  a.Dv = v.size(-1);
  QK_CHECK(attention_fits(a.D, a.Dv), "flash_attention on ", q.device().str(), ": head dims D = ", a.D, " and Dv = ",
           a.Dv, " are too large for the CUDA kernels' shared memory (the backward's 4 warps hold 2 (D + Dv) + 64 "
           "floats each within 48 KiB: D + Dv up to 1504)");
  a.q_sb = q.stride(0);
  a.q_st = q.stride(1);
  a.q_sh = q.stride(2);
  if (q.dim() == 5) {
    a.q_group = q.size(3);
    a.q_sg = q.stride(3);
  }
  a.k_sb = k.stride(0), a.k_ss = k.stride(1), a.k_sh = k.stride(2);
  a.v_sb = v.stride(0), a.v_ss = v.stride(1), a.v_sh = v.stride(2);
  a.scale = static_cast<float>(p.scale);
  a.causal = p.causal;
  if (p.dropout_p > 0) {
    // As the CPU (cpu/flash_attention_layout.cc make_dropout).
    a.dropout_on = true;
    a.keep_below = static_cast<uint32_t>((1.0 - p.dropout_p) * 16777216.0);
    a.keep_scale = p.dropout_p < 1 ? static_cast<float>(1.0 / (1.0 - p.dropout_p)) : 0.0f;
    a.seed = p.seed;
    a.offset = p.offset;
    if (p.offset_base.defined()) a.offset_base = static_cast<const int64_t*>(p.offset_base.raw_data());
  }
  return a;
}

ops::FlashAttentionResult attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                            const ops::FlashAttentionParams& p) {
  QK_CHECK_TYPE(q.dtype() != DType::f64, "flash_attention: f64 is not supported; use f32, bf16 or f16");
  AttentionShape a = shape_of(q, k, v, p);
  Tensor out = empty({a.B, a.T, a.Hq, a.Dv}, on(q, q.dtype()));
  Tensor lse = empty({a.B, a.Hq, a.T}, on(q, DType::f32));
  DeviceStream ds(q.device().index);
  if (by_cudnn([&](std::string* why) { return cudnn_attention_forward(a, q, k, v, out, lse, ds.stream(), why); },
               "forward"))
    return {out, lse};
  const auto launch = use_tiled(a, q.dtype(), {q.raw_data(), k.raw_data(), v.raw_data(), out.raw_data()})
                          ? &launch_tiled_attention_forward
                          : &launch_attention_forward;
  launch(a, static_cast<int>(q.dtype()), q.raw_data(), k.raw_data(), v.raw_data(), out.raw_data(),
         lse.data_ptr<float>(), ds.stream());
  return {out, lse};
}

std::tuple<Tensor, Tensor, Tensor> attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                                      const Tensor& v, const Tensor& out, const Tensor& lse,
                                                      const ops::FlashAttentionParams& p) {
  QK_CHECK_TYPE(q.dtype() != DType::f64, "flash_attention_backward: f64 is not supported; use f32, bf16 or f16");
  AttentionShape a = shape_of(q, k, v, p);
  a.o_sb = out.stride(0), a.o_st = out.stride(1), a.o_sh = out.stride(2);
  a.g_sb = dout.stride(0), a.g_st = dout.stride(1), a.g_sh = dout.stride(2);
  Tensor dq = empty(q.shape(), on(q, q.dtype()));
  Tensor dk = empty(k.shape(), on(k, k.dtype()));
  Tensor dv = empty(v.shape(), on(v, v.dtype()));
  DeviceStream ds(q.device().index);
  if (by_cudnn(
          [&](std::string* why) {
            return cudnn_attention_backward(a, dout, q, k, v, out, lse, dq, dk, dv, ds.stream(), why);
          },
          "backward"))
    return {dq, dk, dv};
  Tensor delta = empty({a.B * a.Hq * a.T}, on(q, DType::f32));
  // (out is read only by the delta pass, element by element.)
  const auto launch = use_tiled(a, q.dtype(), {dout.raw_data(), q.raw_data(), k.raw_data(), v.raw_data(),
                                              dq.raw_data(), dk.raw_data(), dv.raw_data()})
                          ? &launch_tiled_attention_backward
                          : &launch_attention_backward;
  launch(a, static_cast<int>(q.dtype()), dout.raw_data(), q.raw_data(), k.raw_data(), v.raw_data(), out.raw_data(),
         lse.data_ptr<float>(), delta.data_ptr<float>(), dq.raw_data(), dk.raw_data(), dv.raw_data(), ds.stream());
  return {dq, dk, dv};
}

[[maybe_unused]] const bool registered = [] {
  ops::flash_attention_fwd_kernel.set(DeviceType::cuda, &attention_forward);
  ops::flash_attention_bwd_kernel.set(DeviceType::cuda, &attention_backward);
  return true;
}();

}  // namespace

}  // namespace qk::cuda
