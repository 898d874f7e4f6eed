// Raw softmax, loss, dropout and embedding ops: validation, then the kernel.
#include "qk/tensor/ops/nn.h"

#include "qk/tensor/backend.h"
#include "qk/tensor/dispatch.h"
#include "graph_rng.h"
#include "qk/tensor/ops/view.h"
#include "op_kernel_tables.h"
#include "cpu/dropout.h"
#include "cpu/embedding.h"
#include "cpu/loss.h"
#include "cpu/softmax.h"

namespace qk::ops {

QK_DEFINE_KERNEL(softmax_kernel, SoftmaxFn);
QK_DEFINE_KERNEL(softmax_backward_kernel, SoftmaxBwdFn);
QK_DEFINE_KERNEL(cross_entropy_kernel, CrossEntropyFn);
QK_DEFINE_KERNEL(cross_entropy_backward_kernel, CrossEntropyBwdFn);
QK_DEFINE_KERNEL(dropout_kernel, DropoutFn);

QK_DEFINE_KERNEL(embedding_kernel, EmbeddingFn);
QK_DEFINE_KERNEL(embedding_backward_kernel, EmbeddingBwdFn);

namespace {

QK_REGISTER_KERNEL(softmax_kernel, cpu, cpu::softmax_forward);
QK_REGISTER_KERNEL(softmax_backward_kernel, cpu, cpu::softmax_backward);
QK_REGISTER_KERNEL(cross_entropy_kernel, cpu, cpu::cross_entropy);
QK_REGISTER_KERNEL(cross_entropy_backward_kernel, cpu, cpu::cross_entropy_backward);
QK_REGISTER_KERNEL(dropout_kernel, cpu, cpu::dropout);
QK_REGISTER_KERNEL(embedding_kernel, cpu, cpu::embedding);
QK_REGISTER_KERNEL(embedding_backward_kernel, cpu, cpu::embedding_backward);


// A 0-d tensor is softmaxed as one element of a [1] row.
Tensor as_rows(const Tensor& t) { return t.dim() == 0 ? unsqueeze(t, 0) : t; }

Tensor softmax_any(const Tensor& x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  QK_CHECK_TYPE(is_floating(x.dtype()), op, ": expected a floating-point input, got ",
                dtype_name(x.dtype()), " of shape ", shape_str(x.shape()));
  Tensor xr = as_rows(x);
  const int64_t d = xr.wrap_dim(dim, op);
  Tensor out = softmax_kernel.get(x.device())(contiguous(xr), d, log);
  return x.dim() == 0 ? squeeze(out, 0) : out;
}

Tensor softmax_backward_any(const Tensor& grad, const Tensor& out, int64_t dim, bool log) {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  QK_CHECK(grad.shape() == out.shape(), op, ": grad shape ", shape_str(grad.shape()),
           " does not match the output shape ", shape_str(out.shape()));
  QK_CHECK_TYPE(grad.dtype() == out.dtype() && is_floating(out.dtype()), op,
                ": expected grad and output of one floating dtype, got ", dtype_name(grad.dtype()),
                " and ", dtype_name(out.dtype()));
  QK_CHECK_DEVICE(grad.device() == out.device(), op, ": grad is on ", grad.device().str(),
                  " but the output is on ", out.device().str());
  Tensor g = as_rows(grad), y = as_rows(out);
  const int64_t d = y.wrap_dim(dim, op);
  Tensor dx = softmax_backward_kernel.get(out.device())(contiguous(g), contiguous(y), d, log);
  return out.dim() == 0 ? squeeze(dx, 0) : dx;
}

// [C] logits with a 0-d target are one sample: [1, C] and [1].
void check_cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing) {
  QK_CHECK_TYPE(is_floating(logits.dtype()), "cross_entropy: expected floating-point logits, got ",
                dtype_name(logits.dtype()));
  QK_CHECK_TYPE(target.dtype() == DType::i64 || target.dtype() == DType::i32,
                "cross_entropy: expected class-index targets (i64 or i32), got ",
                dtype_name(target.dtype()),
                " (probability targets are not supported; use one-hot with a manual loss)");
  QK_CHECK_DEVICE(logits.device() == target.device(), "cross_entropy: logits are on ",
                  logits.device().str(), " but the target is on ", target.device().str());
  QK_CHECK(logits.dim() >= 1, "cross_entropy: expected logits [N, C, ...] or [C], got ",
           shape_str(logits.shape()));
  Shape want;
  if (logits.dim() >= 2) {
    want = logits.shape();
    want.erase(want.begin() + 1);
  }
  QK_CHECK(target.shape() == want, "cross_entropy: logits ", shape_str(logits.shape()),
           " need a target of shape ", shape_str(want), ", got ", shape_str(target.shape()));
  QK_CHECK(label_smoothing >= 0 && label_smoothing <= 1,
           "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_any(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_any(x, dim, true); }
Tensor softmax_backward(const Tensor& grad, const Tensor& out, int64_t dim) {
  return softmax_backward_any(grad, out, dim, false);
}
Tensor log_softmax_backward(const Tensor& grad, const Tensor& out, int64_t dim) {
  return softmax_backward_any(grad, out, dim, true);
}

CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                 double label_smoothing, Reduction reduction) {
  check_cross_entropy(logits, target, label_smoothing);
  if (logits.dim() == 1) {  // one unbatched sample
    auto r = cross_entropy(unsqueeze(logits, 0), unsqueeze(target, 0), ignore_index,
                           label_smoothing, reduction);
    if (reduction == Reduction::none) r.loss = squeeze(r.loss, 0);
    r.log_probs = reshape(r.log_probs, logits.shape());
    return r;
  }
  return cross_entropy_kernel.get(logits.device())(contiguous(logits), contiguous(target), ignore_index,
                                                   label_smoothing, reduction);
}

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& log_probs,
                              const Tensor& target, int64_t ignore_index, double label_smoothing,
                              Reduction reduction) {
  check_cross_entropy(log_probs, target, label_smoothing);
  Shape loss_shape = reduction == Reduction::none ? target.shape() : Shape{};
  QK_CHECK(grad_loss.shape() == loss_shape, "cross_entropy_backward: expected grad_loss of shape ",
           shape_str(loss_shape), ", got ", shape_str(grad_loss.shape()));
  if (log_probs.dim() == 1) {
    Tensor g = reduction == Reduction::none ? unsqueeze(grad_loss, 0) : grad_loss;
    return reshape(cross_entropy_backward(g, unsqueeze(log_probs, 0), unsqueeze(target, 0),
                                          ignore_index, label_smoothing, reduction),
                   log_probs.shape());
  }
  Tensor g =
      grad_loss.dtype() == log_probs.dtype() ? grad_loss : cast(grad_loss, log_probs.dtype());
  return cross_entropy_backward_kernel.get(log_probs.device())(
      contiguous(g), contiguous(log_probs), contiguous(target), ignore_index, label_smoothing, reduction);
}

std::pair<Tensor, Tensor> dropout(const Tensor& x, double p, Generator& gen) {
  QK_CHECK_TYPE(is_floating(x.dtype()), "dropout: expected a floating-point input, got ",
                dtype_name(x.dtype()));
  QK_CHECK(p >= 0 && p <= 1, "dropout: probability p must be in [0, 1], got ", p);
  // Each Philox call yields 4 words: element i uses counter offset + i / 4.
  const uint64_t counters = (static_cast<uint64_t>(x.numel()) + 3) / 4;
  if (capturing(x.device())) {
    // Recorded in a graph: counters relative to a base each replay moves on (graph_rng.h).
    const GraphCounter c = graph_rng_counter(gen, counters, x.device());
    return dropout_kernel.get(x.device())(contiguous(x), p, gen.seed(), c.relative, c.base);
  }
  const uint64_t offset = gen.advance(counters);
  return dropout_kernel.get(x.device())(contiguous(x), p, gen.seed(), offset, Tensor());
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  QK_CHECK(weight.dim() == 2, "embedding: expected weight [num_embeddings, dim], got ",
           shape_str(weight.shape()));
  QK_CHECK_TYPE(indices.dtype() == DType::i64 || indices.dtype() == DType::i32,
                "embedding: expected indices of dtype i64 or i32, got ",
                dtype_name(indices.dtype()));
  QK_CHECK_DEVICE(weight.device() == indices.device(), "embedding: weight is on ",
                  weight.device().str(), " but indices are on ", indices.device().str());
  return embedding_kernel.get(weight.device())(contiguous(weight), contiguous(indices));
}

Tensor embedding_backward(const Tensor& grad, const Tensor& indices, int64_t num_weights,
                          int64_t padding_idx) {
  QK_CHECK_TYPE(indices.dtype() == DType::i64 || indices.dtype() == DType::i32,
                "embedding_backward: expected indices of dtype i64 or i32, got ",
                dtype_name(indices.dtype()));
  QK_CHECK_TYPE(is_floating(grad.dtype()), "embedding_backward: expected a floating grad, got ",
                dtype_name(grad.dtype()));
  QK_CHECK_DEVICE(grad.device() == indices.device(), "embedding_backward: grad is on ",
                  grad.device().str(), " but indices are on ", indices.device().str());
  Shape want = indices.shape();
  want.push_back(grad.dim() > 0 ? grad.size(-1) : 0);
  QK_CHECK(grad.dim() == indices.dim() + 1 && grad.shape() == want, "embedding_backward: grad ",
           shape_str(grad.shape()), " does not fit indices ", shape_str(indices.shape()),
           " (expected indices.shape + [dim])");
  QK_CHECK(num_weights >= 0 && padding_idx < num_weights, "embedding_backward: padding_idx ",
           padding_idx, " out of range for ", num_weights, " embeddings");
  return embedding_backward_kernel.get(grad.device())(contiguous(grad), contiguous(indices), num_weights,
                                                      padding_idx);
}

}  // namespace qk::ops
