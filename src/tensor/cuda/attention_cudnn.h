// cuDNN's fused flash attention: cuDNN 9's scaled-dot-product attention,
// forward and backward, built through its graph API by cudnn-frontend
// (third_party/cudnn_frontend), as PyTorch's cuDNN attention backend does.
// The graphs are built once per shape (plan_cache.h) and run on the current
// stream with a workspace from the caching allocator.
//
// Each call returns false, having done nothing, when cuDNN does not take it:
// what only qk's kernels do (f32, dropout in qk's Philox stream, a causal
// mask with T != S, grouped query heads not evenly spaced), or a graph that
// cuDNN refused for this shape on this GPU (asked once per shape; the reason
// is logged at debug level). `why`, when given, says why not.
#pragma once

#include <string>

#include "attention_kernels.h"
#include "qk/tensor/tensor.h"

namespace qk::cuda {

#if QK_HAVE_CUDNN

// out [B, T, Hq, Dv] and lse [B, Hq, T] f32, both contiguous (attention_ops.cc).
bool cudnn_attention_forward(const AttentionShape& a, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, cudaStream_t stream, std::string* why = nullptr);

// dq, dk, dv contiguous in q's, k's and v's shapes; lse the forward's.
bool cudnn_attention_backward(const AttentionShape& a, const Tensor& dout, const Tensor& q, const Tensor& k,
                              const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dq,
                              const Tensor& dk, const Tensor& dv, cudaStream_t stream, std::string* why = nullptr);

#else  // built without cuDNN: it takes nothing

inline bool cudnn_attention_forward(const AttentionShape&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                    const Tensor&, cudaStream_t, std::string* why = nullptr) {
  if (why) *why = "this qk was built without cuDNN";
  return false;
}
inline bool cudnn_attention_backward(const AttentionShape&, const Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&, cudaStream_t, std::string* why = nullptr) {
  if (why) *why = "this qk was built without cuDNN";
  return false;
}

#endif

}  // namespace qk::cuda
