// Vocabulary-parallel cross entropy: per-row max and sum of exponentials
// reduced over the tensor-parallel group, backward on the local columns.
#include "qk/parallel/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "qk/autograd/autograd.h"
#include "qk/base/error.h"
#include "qk/base/thread_pool.h"
#include "qk/base/vec_math.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/index.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"

namespace qk::parallel {

namespace {

// Rows per chunk of the thread pool: about 16k logits each.
int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)); }

// The row loops keep kLanes independent partial results so GCC vectorizes
// them (a single max or sum is a dependency chain it may not reorder), with
// exp_vec instead of libm's scalar expf: 10x the scalar loop.
constexpr int kLanes = 16;

float row_max(const float* __restrict row, int64_t cols) {
  float lane[kLanes];
  std::fill(lane, lane + kLanes, -std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + kLanes <= cols; j += kLanes)
    for (int q = 0; q < kLanes; ++q) lane[q] = std::max(lane[q], row[j + q]);
  for (; j < cols; ++j) lane[0] = std::max(lane[0], row[j]);
  return *std::max_element(lane, lane + kLanes);
}

// sum_j exp(row[j] - m): f32 exp and lanes, the lanes summed in f64.
double row_sum_exp(const float* __restrict row, int64_t cols, float m) {
  float lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= cols; j += kLanes)
    for (int q = 0; q < kLanes; ++q) lane[q] += exp_vec(row[j + q] - m);
  for (; j < cols; ++j) lane[0] += exp_vec(row[j] - m);
  double sum = 0;
  for (const float v : lane) sum += v;
  return sum;
}

// What backward needs besides the logits: per row the global max, the
// global sum of exp(logit - max), and the target column on this rank (-1:
// another rank owns it, -2: ignored).
struct Saved {
  Tensor logits;  // [N, Vl] f32 contiguous
  std::vector<float> max;
  std::vector<double> sum_exp;
  std::vector<int64_t> local_target;
  DType input_dtype;
  Shape input_shape;
};

// The same on a device, as whole-tensor ops (the loops above read host
// memory): max, exp and sums on the device, the two all-reduces on device
// tensors. The targets (a micro-batch's: small) are checked and mapped on
// the host. f32 exp, f64 sums, as above; the device's own reduction order.
Tensor on_device(const Tensor& x, const Tensor& target, dist::ProcessGroup& tp, int64_t ignore_index,
                 const Shape& lead) {
  using ops::binary;
  using ops::unary;
  const Device dev = x.device();
  const int64_t cols = x.size(-1), rows = target.numel();
  const int64_t vocab_start = static_cast<int64_t>(tp.rank()) * cols, vocab = cols * tp.size();
  const Tensor t = ops::contiguous(target).to(kCPU);
  const int64_t* tg = t.data_ptr<int64_t>();
  std::vector<int64_t> local(rows, 0);
  std::vector<double> owned(rows, 0), counted(rows, 0);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t v = tg[i];
    if (v == ignore_index) continue;
    QK_CHECK_AS(IndexError, v >= 0 && v < vocab, "vocab_parallel_cross_entropy: target ", v, " at ", i,
                " is outside the vocabulary [0, ", vocab, ") (ignore_index ", ignore_index, ")");
    counted[i] = 1;
    if (v >= vocab_start && v < vocab_start + cols) {
      local[i] = v - vocab_start;
      owned[i] = 1;
    }
  }
  const Tensor local_t = from_vector<int64_t>(local, {rows, 1}).to(dev);
  const Tensor owned_t = from_vector<double>(owned, {rows}).to(dev);
  const Tensor counted_t = from_vector<double>(counted, {rows}).to(dev);

  const Tensor logits = ops::contiguous(
      ops::reshape(x.dtype() == DType::f32 ? x.detach() : ops::cast(x.detach(), DType::f32), {rows, cols}));
  Tensor max = ops::contiguous(ops::amax(logits, {1}));
  tp.all_reduce(max, dist::ReduceOp::max);
  const Tensor shifted = binary(BinaryOp::sub, logits, ops::unsqueeze(max, 1));
  const Tensor sum_exp_local = ops::sum(ops::cast(unary(UnaryOp::exp, shifted), DType::f64), {1});
  const Tensor predicted_local = binary(
      BinaryOp::mul, ops::cast(ops::reshape(ops::gather(shifted, 1, local_t), {rows}), DType::f64), owned_t);
  // [sum of exp(logit - max); target logit - max], one all-reduce.
  Tensor stats = ops::cat({sum_exp_local, predicted_local}, 0);
  tp.all_reduce(stats);
  const Tensor sum_exp = ops::narrow(stats, 0, 0, rows), predicted = ops::narrow(stats, 0, rows, rows);
  const Tensor loss64 = binary(BinaryOp::mul, binary(BinaryOp::sub, unary(UnaryOp::log, sum_exp), predicted), counted_t);
  const Tensor loss = ops::reshape(ops::cast(loss64, DType::f32), lead);

  const DType input_dtype = x.dtype();
  const Shape input_shape = x.shape();
  autograd::record("VocabParallelCrossEntropyBackward", {x}, {loss},
                   [logits, max, sum_exp, local_t, owned_t, counted_t, rows, cols, input_dtype,
                    input_shape](const std::vector<Tensor>& g) {
                     const Tensor go = ops::cast(ops::reshape(g[0], {rows}), DType::f64);
                     // softmax * dL: exp(logit - max) * go / sum_exp; minus go at the target column.
                     const Tensor scale =
                         ops::cast(binary(BinaryOp::mul, binary(BinaryOp::div, go, sum_exp), counted_t), DType::f32);
                     Tensor grad = binary(BinaryOp::mul,
                                          unary(UnaryOp::exp, binary(BinaryOp::sub, logits, ops::unsqueeze(max, 1))),
                                          ops::unsqueeze(scale, 1));
                     const Tensor at_target = ops::cast(
                         binary(BinaryOp::mul, binary(BinaryOp::mul, go, owned_t), counted_t), DType::f32);
                     const Tensor hot = ops::cast(ops::one_hot(ops::reshape(local_t, {rows}), cols), DType::f32);
                     grad = binary(BinaryOp::sub, grad, binary(BinaryOp::mul, hot, ops::unsqueeze(at_target, 1)));
                     Tensor out_grad = ops::reshape(grad, input_shape);
                     if (input_dtype != DType::f32) out_grad = ops::cast(out_grad, input_dtype);
                     return std::vector<Tensor>{out_grad};
                   });
  return loss;
}

}  // namespace

Tensor vocab_parallel_cross_entropy(const Tensor& vocab_parallel_logits, const Tensor& target, dist::ProcessGroup& tp,
                                    int64_t ignore_index) {
  const Tensor& x = vocab_parallel_logits;
  QK_CHECK(x.defined() && x.dim() >= 1 && target.defined(), "vocab_parallel_cross_entropy: expected logits [..., V/tp] "
           "and a target");
  QK_CHECK_TYPE(target.dtype() == DType::i64, "vocab_parallel_cross_entropy: target must be i64, got ",
                dtype_name(target.dtype()));
  Shape lead = x.shape();
  lead.pop_back();
  QK_CHECK(target.shape() == lead, "vocab_parallel_cross_entropy: target ", shape_str(target.shape()),
           " must match the logits' leading dims ", shape_str(x.shape()));
  if (!x.device().is_cpu()) return on_device(x, target, tp, ignore_index, lead);
  const int64_t cols = x.size(-1), rows = target.numel();
  const int64_t vocab_start = static_cast<int64_t>(tp.rank()) * cols;
  const int64_t vocab = cols * tp.size();

  auto s = std::make_shared<Saved>();
  s->input_dtype = x.dtype();
  s->input_shape = x.shape();
  s->logits = ops::contiguous(ops::reshape(x.dtype() == DType::f32 ? x.detach() : ops::cast(x.detach(), DType::f32),
                                           {rows, cols}));
  const Tensor t = ops::contiguous(target);
  const int64_t* tg = t.data_ptr<int64_t>();
  s->local_target.resize(rows);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t v = tg[i];
    if (v == ignore_index) {
      s->local_target[i] = -2;
      continue;
    }
    QK_CHECK_AS(IndexError, v >= 0 && v < vocab, "vocab_parallel_cross_entropy: target ", v, " at ", i,
                " is outside the vocabulary [0, ", vocab, ") (ignore_index ", ignore_index, ")");
    s->local_target[i] = v >= vocab_start && v < vocab_start + cols ? v - vocab_start : -1;
  }

  const float* l = s->logits.data_ptr<float>();
  Tensor max = empty({rows});
  float* mx = max.data_ptr<float>();
  parallel_for(0, rows, row_grain(cols), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) mx[i] = row_max(l + i * cols, cols);
  });
  tp.all_reduce(max, dist::ReduceOp::max);

  // [sum of exp(logit - max); target logit - max (0 on the ranks without it)], one all-reduce.
  Tensor stats = zeros({2, rows}, TensorOptions(DType::f64));
  double* sum_exp = stats.data_ptr<double>();
  double* predicted = sum_exp + rows;
  parallel_for(0, rows, row_grain(cols), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float* row = l + i * cols;
      sum_exp[i] = row_sum_exp(row, cols, mx[i]);
      if (s->local_target[i] >= 0) predicted[i] = static_cast<double>(row[s->local_target[i]] - mx[i]);
    }
  });
  tp.all_reduce(stats);

  Tensor loss = empty({rows});
  float* out = loss.data_ptr<float>();
  s->max.assign(mx, mx + rows);
  s->sum_exp.assign(sum_exp, sum_exp + rows);
  for (int64_t i = 0; i < rows; ++i)
    out[i] = s->local_target[i] == -2 ? 0.0f : static_cast<float>(std::log(sum_exp[i]) - predicted[i]);
  loss = ops::reshape(loss, lead);

  autograd::record("VocabParallelCrossEntropyBackward", {x}, {loss}, [s, cols, rows](const std::vector<Tensor>& g) {
    const Tensor go = ops::contiguous(ops::cast(g[0], DType::f32));
    const float* gout = go.data_ptr<float>();
    Tensor grad = empty({rows, cols});
    float* gr = grad.data_ptr<float>();
    const float* lg = s->logits.data_ptr<float>();
    parallel_for(0, rows, row_grain(cols), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        float* dst = gr + i * cols;
        const int64_t tl = s->local_target[i];
        if (tl == -2) {
          std::fill(dst, dst + cols, 0.0f);
          continue;
        }
        const float scale = static_cast<float>(static_cast<double>(gout[i]) / s->sum_exp[i]);
        const float* row = lg + i * cols;
        const float m = s->max[i];
        for (int64_t j = 0; j < cols; ++j) dst[j] = exp_vec(row[j] - m) * scale;
        if (tl >= 0) dst[tl] -= gout[i];
      }
    });
    Tensor out_grad = ops::reshape(grad, s->input_shape);
    if (s->input_dtype != DType::f32) out_grad = ops::cast(out_grad, s->input_dtype);
    return std::vector<Tensor>{out_grad};
  });
  return loss;
}

}  // namespace qk::parallel
