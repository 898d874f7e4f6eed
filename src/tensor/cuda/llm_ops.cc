// The CUDA backend's kernel-table entries of LLM layers: layer and RMS norm
// (llm_norm.cu), embedding (embedding.cu), rotary embedding and SwiGLU
// (llm.cu), with the CPU kernels' contracts (src/tensor/cpu/norm.h,
// embedding.h, rotary.h, swiglu.h): the same output shapes and dtypes (the
// norms' statistics in f32, f64 for f64, shaped as x with the normalised
// dims kept as 1; their weight gradients in the weight's dtype, the bias
// gradient too, or x's without a weight), undefined weight and bias as 1
// and 0, f16/bf16 computed in f32.
//
// An embedding index out of range raises IndexError with the CPU's message
// in the forward: the kernel leaves the first bad position in a device flag,
// read back once per call (8 bytes; a stall only of this call). The backward
// does not read it back, as cross entropy's backward (loss_ops.cc): the
// forward raised for these indices already, and a read would stall the host
// in the middle of every backward pass; such an index reaching the backward
// alone counts for nothing there, where the CPU raises.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda_check.h"
#include "deferred_checks.h"
#include "llm_kernels.h"
#include "op_kernel_tables.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/view.h"
#include "stream_handle.h"

namespace qk::cuda {

namespace {

TensorOptions on(const Tensor& like, DType t) { return TensorOptions().dtype(t).device(like.device()); }
int code(const Tensor& t) { return static_cast<int>(t.dtype()); }
const void* data_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }
void* data_or_null_mut(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

// Accumulation (and statistics) dtype: f64 for f64, else f32.
DType acc_of(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// A 1-D parameter as contiguous accumulation values (it may be of another
// floating dtype than x, as the CPU's param_values allows); undefined stays so.
Tensor param_as(const Tensor& p, DType a) { return p.defined() ? ops::contiguous(ops::cast(p, a)) : Tensor(); }

Tensor contig(const Tensor& t) { return t.is_contiguous() ? t : ops::contiguous(t); }

// mean/rstd keep x's leading dims and 1 for each normalised dim (cpu/norm_layer.cc).
Shape stat_shape(const Tensor& x, const Shape& nshape) {
  Shape s(x.shape().begin(), x.shape().end() - static_cast<int64_t>(nshape.size()));
  s.resize(x.shape().size(), 1);
  return s;
}

struct Rows {
  int64_t M, D;
};
Rows rows_of(const Tensor& x, const Shape& nshape) {
  const int64_t D = shape_numel(nshape);
  return {D == 0 ? 0 : x.numel() / D, D};
}

// ---- layer and RMS norm ----

std::tuple<Tensor, Tensor, Tensor> layer_norm_on_device(const Tensor& x, const Shape& nshape, const Tensor& weight,
                                                        const Tensor& bias, double eps) {
  DeviceStream ds(x.device().index);
  const auto [M, D] = rows_of(x, nshape);
  const DType a = acc_of(x.dtype());
  Tensor out = empty(x.shape(), on(x, x.dtype()));
  Tensor mean = empty(stat_shape(x, nshape), on(x, a));
  Tensor rstd = empty(stat_shape(x, nshape), on(x, a));
  if (M > 0) {
    Tensor w = param_as(weight, a), b = param_as(bias, a);
    launch_norm_forward(true, out.raw_data(), mean.raw_data(), rstd.raw_data(), x.raw_data(), code(x),
                        data_or_null(w), data_or_null(b), M, D, eps, ds.stream());
  }
  return {out, mean, rstd};
}

std::pair<Tensor, Tensor> rms_norm_on_device(const Tensor& x, const Shape& nshape, const Tensor& weight, double eps) {
  DeviceStream ds(x.device().index);
  const auto [M, D] = rows_of(x, nshape);
  const DType a = acc_of(x.dtype());
  Tensor out = empty(x.shape(), on(x, x.dtype()));
  Tensor rstd = empty(stat_shape(x, nshape), on(x, a));
  if (M > 0) {
    Tensor w = param_as(weight, a);
    launch_norm_forward(false, out.raw_data(), nullptr, rstd.raw_data(), x.raw_data(), code(x), data_or_null(w),
                        nullptr, M, D, eps, ds.stream());
  }
  return {out, rstd};
}

// dweight (when wanted) and dbias (layer norm) of shape nshape in `pdt`:
// zeros without rows, as the CPU's sums of no partials.
void param_grads(bool layer, const Tensor& dw, const Tensor& db, const Tensor& g, const Tensor& x,
                 const Tensor& mean, const Tensor& rstd, int64_t M, int64_t D, cudaStream_t s) {
  if (D == 0) return;
  if (M == 0) {
    if (dw.defined()) ops::fill_(dw, 0.0);
    if (db.defined()) ops::fill_(db, 0.0);
    return;
  }
  const int64_t chunks = norm_param_chunks(M, D);
  Tensor part = empty({2 * chunks * D}, on(x, acc_of(x.dtype())));
  launch_norm_param_grads(layer, data_or_null_mut(dw), dw.defined() ? code(dw) : 0, data_or_null_mut(db),
                          db.defined() ? code(db) : 0, part.raw_data(), chunks, g.raw_data(), x.raw_data(),
                          data_or_null(mean), rstd.raw_data(), code(x), M, D, s);
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_backward_on_device(const Tensor& grad_out, const Tensor& x,
                                                                 const Shape& nshape, const Tensor& mean,
                                                                 const Tensor& rstd, const Tensor& weight) {
  DeviceStream ds(x.device().index);
  const auto [M, D] = rows_of(x, nshape);
  const DType a = acc_of(x.dtype());
  const DType pdt = weight.defined() ? weight.dtype() : x.dtype();
  Tensor dx = empty(x.shape(), on(x, x.dtype()));
  Tensor dw = weight.defined() ? empty(nshape, on(x, pdt)) : Tensor();
  Tensor db = empty(nshape, on(x, pdt));  // the CPU returns dbias whether or not there is a bias
  if (M > 0) {
    Tensor mu = contig(ops::cast(mean, a)), rs = contig(ops::cast(rstd, a)), w = param_as(weight, a);
    launch_norm_backward_dx(true, dx.raw_data(), grad_out.raw_data(), x.raw_data(), mu.raw_data(), rs.raw_data(),
                            data_or_null(w), code(x), M, D, ds.stream());
    param_grads(true, dw, db, grad_out, x, mu, rs, M, D, ds.stream());
  } else {
    param_grads(true, dw, db, grad_out, x, Tensor(), Tensor(), M, D, ds.stream());
  }
  return {dx, dw, db};
}

std::pair<Tensor, Tensor> rms_norm_backward_on_device(const Tensor& grad_out, const Tensor& x, const Shape& nshape,
                                                      const Tensor& rstd, const Tensor& weight) {
  DeviceStream ds(x.device().index);
  const auto [M, D] = rows_of(x, nshape);
  const DType a = acc_of(x.dtype());
  Tensor dx = empty(x.shape(), on(x, x.dtype()));
  Tensor dw = weight.defined() ? empty(nshape, on(x, weight.dtype())) : Tensor();
  if (M > 0) {
    Tensor rs = contig(ops::cast(rstd, a)), w = param_as(weight, a);
    launch_norm_backward_dx(false, dx.raw_data(), grad_out.raw_data(), x.raw_data(), nullptr, rs.raw_data(),
                            data_or_null(w), code(x), M, D, ds.stream());
    if (dw.defined()) param_grads(false, dw, Tensor(), grad_out, x, Tensor(), rs, M, D, ds.stream());
  } else if (dw.defined()) {
    param_grads(false, dw, Tensor(), grad_out, x, Tensor(), Tensor(), M, D, ds.stream());
  }
  return {dx, dw};
}

// ---- embedding ----

// The CPU's message (cpu/embedding.cc check_indices) for the first bad
// position, made when the host next waits for the device (deferred_checks.h).
void check_later(const Tensor& bad, const Tensor& indices, int64_t V, const char* op, cudaStream_t s) {
  defer_check(bad, s, [indices, V, op](int64_t pos) {
    Tensor flat = ops::reshape(indices, {indices.numel()});
    const int64_t v =
        ops::cast(ops::to_device(ops::slice(flat, 0, pos, pos + 1), kCPU), DType::i64).item<int64_t>();
    return detail::str_cat(op, ": index ", v, " at position ", pos, " is out of range for ", V, " embeddings");
  });
}

Tensor embedding_on_device(const Tensor& weight, const Tensor& indices) {
  DeviceStream ds(weight.device().index);
  const int64_t V = weight.size(0), D = weight.size(1), M = indices.numel();
  Shape shape = indices.shape();
  shape.push_back(D);
  Tensor out = empty(shape, on(weight, weight.dtype()));
  if (M == 0) return out;
  Tensor bad = new_error_flag(weight, ds.stream());
  launch_embedding(out.raw_data(), weight.raw_data(), static_cast<size_t>(D) * weight.itemsize(),
                   indices.raw_data(), code(indices), M, V, error_flag_ptr(bad), ds.stream());
  check_later(bad, indices, V, "embedding", ds.stream());
  return out;
}

Tensor embedding_backward_on_device(const Tensor& grad, const Tensor& indices, int64_t num_weights,
                                    int64_t padding_idx) {
  DeviceStream ds(grad.device().index);
  const int64_t V = num_weights, D = grad.dim() > 0 ? grad.size(-1) : 0, M = indices.numel();
  Tensor dw = zeros({V, D}, on(grad, grad.dtype()));
  if (M == 0 || D == 0 || V == 0) return dw;
  const size_t bytes = embedding_backward_workspace(M, V);
  Tensor ws = empty({static_cast<int64_t>(bytes)}, on(grad, DType::u8));
  launch_embedding_backward(dw.raw_data(), grad.raw_data(), code(grad), indices.raw_data(), code(indices), M, D, V,
                            padding_idx, ws.raw_data(), bytes, ds.stream());
  return dw;
}

// ---- rotary embedding and SwiGLU ----

Tensor rotary_on_device(const Tensor& x, const Tensor& cos, const Tensor& sin, bool backward) {
  DeviceStream ds(x.device().index);
  Tensor out = empty(x.shape(), on(x, x.dtype()));
  if (out.numel() == 0) return out;
  launch_rotary(out.raw_data(), x.raw_data(), code(x), x.size(0), x.size(1), x.size(2), x.size(3), x.stride(0),
                x.stride(1), x.stride(2), cos.raw_data(), sin.raw_data(), code(cos), cos.size(1), backward,
                ds.stream());
  return out;
}

Shape half_last(const Shape& s) {
  Shape out = s;
  out.back() /= 2;
  return out;
}

Tensor swiglu_on_device(const Tensor& x) {
  DeviceStream ds(x.device().index);
  const int64_t F = x.size(-1) / 2, rows = F == 0 ? 0 : x.numel() / (2 * F);
  Tensor y = empty(half_last(x.shape()), on(x, x.dtype()));
  launch_swiglu(y.raw_data(), x.raw_data(), code(x), rows, F, ds.stream());
  return y;
}

Tensor swiglu_backward_on_device(const Tensor& grad, const Tensor& x) {
  DeviceStream ds(x.device().index);
  const int64_t F = x.size(-1) / 2, rows = F == 0 ? 0 : x.numel() / (2 * F);
  Tensor dx = empty(x.shape(), on(x, x.dtype()));
  launch_swiglu_backward(dx.raw_data(), grad.raw_data(), x.raw_data(), code(x), rows, F, ds.stream());
  return dx;
}

[[maybe_unused]] const bool registered = [] {
  ops::layer_norm_kernel.set(DeviceType::cuda, &layer_norm_on_device);
  ops::layer_norm_backward_kernel.set(DeviceType::cuda, &layer_norm_backward_on_device);
  ops::rms_norm_kernel.set(DeviceType::cuda, &rms_norm_on_device);
  ops::rms_norm_backward_kernel.set(DeviceType::cuda, &rms_norm_backward_on_device);
  ops::embedding_kernel.set(DeviceType::cuda, &embedding_on_device);
  ops::embedding_backward_kernel.set(DeviceType::cuda, &embedding_backward_on_device);
  ops::rotary_embedding_kernel.set(DeviceType::cuda, &rotary_on_device);
  ops::swiglu_kernel.set(DeviceType::cuda, &swiglu_on_device);
  ops::swiglu_backward_kernel.set(DeviceType::cuda, &swiglu_backward_on_device);
  return true;
}();

}  // namespace

}  // namespace qk::cuda
