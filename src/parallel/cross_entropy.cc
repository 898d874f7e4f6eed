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
#include "qk/tensor/ops/view.h"

namespace qk::parallel {

namespace {

// Rows per chunk of the thread pool: about 16k logits each.
int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)); }

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
    for (int64_t i = lo; i < hi; ++i) {
      const float* row = l + i * cols;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < cols; ++j) m = std::max(m, row[j]);
      mx[i] = m;
    }
  });
  tp.all_reduce(max, dist::ReduceOp::max);

  // [sum of exp(logit - max); target logit - max (0 on the ranks without it)], one all-reduce.
  Tensor stats = zeros({2, rows}, TensorOptions(DType::f64));
  double* sum_exp = stats.data_ptr<double>();
  double* predicted = sum_exp + rows;
  parallel_for(0, rows, row_grain(cols), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float* row = l + i * cols;
      double acc = 0;
      for (int64_t j = 0; j < cols; ++j) acc += std::exp(row[j] - mx[i]);  // f32 exp, f64 sum
      sum_exp[i] = acc;
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
        for (int64_t j = 0; j < cols; ++j) dst[j] = std::exp(row[j] - m) * scale;
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
