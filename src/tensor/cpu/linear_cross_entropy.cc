// The output layer and cross entropy in one pass over chunks of rows, never
// holding the [N, V] logits. Per chunk of r counted rows (targets not
// ignore_index; ignored rows are skipped, not computed and zeroed):
//   1. logits [r, V] = h_c . W^T                      (GEMM, f32 accumulation)
//   2. per row: lse = logsumexp(logits), loss = w_i (lse - logit[t]) and, for
//      the gradients, dlogits = w_i (softmax - onehot(t)) in place
//   3. dh_c [r, C] = dlogits . W                      (GEMM)
//   4. dW [V, C] (+)= dlogits^T . h_c                 (GEMM, accumulating
//      over the chunks)
// so the loss and both gradients cost the three GEMMs of the unfused layer.
// bf16 inputs multiply in bf16 with f32 accumulation (oneDNN) and take the
// softmax in f32; dlogits are rounded to bf16 for steps 3-4, as the unfused
// bf16 layer's gradient would be.
//
// Note [Chunk size]: chunks are rows, each with the whole vocabulary (the
// softmax needs the row's full logsumexp before any gradient), so dW is
// accumulated over chunks: each extra chunk streams W through the three
// GEMMs once more and reads and writes the f32 dW once more (for GPT-2,
// 3 x 77-154 MB + 2 x 154 MB). Fewer, larger chunks are faster, at the price
// of the chunk's memory. Measured for GPT-2 at 256 tokens (2 threads, CPU
// time per call): f32 285-308 ms in one chunk, 295-312 in two, 338 in
// three, 453 in eight; bf16 163-170 in one, 182-187 in two (195-208 before
// the last chunk's product took over dW's final rounding).
// kLogitsChunkBytes = 64 MiB of f32 logits keeps that case in one chunk
// (51 MB, against 3 x 51 MB of logits, log-probs and their gradient in the
// unfused layer) and bounds larger ones: 4096 tokens of a 32000 vocabulary
// run in 8 chunks of 512 rows, where the extra traffic is a few percent of
// the GEMMs' time.
#include "cpu/linear_cross_entropy.h"

#include <cmath>
#include <vector>

#include "qk/base/thread_pool.h"
#include "qk/tensor/ops/view.h"
#include "cpu/gemm.h"
#include "cpu/norm_lanes.h"
#include "cpu/onednn_matmul.h"
#include "cpu/softmax.h"

namespace qk::cpu {
namespace {

constexpr int64_t kLogitsChunkBytes = int64_t{64} << 20;

// The counted rows: index, target and weight of each.
struct Rows {
  std::vector<int64_t> index, target;
  std::vector<double> weight;
};

Rows counted_rows(const Tensor& target, const Tensor& token_weight, int64_t V,
                  int64_t ignore_index) {
  Rows r;
  const int64_t N = target.numel();
  std::vector<double> tw = token_weight.defined() ? token_weight.to_vector<double>()
                                                  : std::vector<double>(N, 1.0);
  dispatch_index(target.dtype(), "linear_cross_entropy", [&](auto itag) {
    const auto* tp = target.data_ptr<decltype(itag)>();
    for (int64_t i = 0; i < N; ++i) {
      const auto t = static_cast<int64_t>(tp[i]);
      if (t == ignore_index) continue;
      QK_CHECK_INDEX(t >= 0 && t < V, "linear_cross_entropy: target ", t, " at row ", i,
                     " is out of range for a vocabulary of ", V, " (and is not ignore_index ",
                     ignore_index, ")");
      r.index.push_back(i);
      r.target.push_back(t);
      r.weight.push_back(tw[i]);
    }
  });
  return r;
}

// C (+)= op(A) op(B) with A, B of the inputs' type T and C of type CT.
template <typename T, typename CT>
void gemm_into(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
               const T* b, int64_t ldb, bool accumulate, CT* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    gemm_bf16(ta, tb, m, n, k, a, lda, b, ldb, accumulate, c, dtype_of_v<CT>, ldc);
  } else {
    static_assert(std::is_same_v<T, CT>);
    gemm<T>(ta, tb, m, n, k, T(1), a, lda, b, ldb, accumulate ? T(1) : T(0), c, ldc);
  }
}

// Step 2 on one row of logits l (type A): returns lse - l[t]; with `grad`,
// replaces l by w (softmax(l) - onehot(t)), or writes that to `low` (bf16)
// when given.
template <typename A, typename L>
double row_loss_and_grad(A* __restrict l, int64_t V, int64_t t, A w, bool grad,
                         L* __restrict low) {
  const A m = row_max<A>(l, V);
  const A lt = l[t];
  constexpr int kL = kLanes<A>;
  A acc[kL] = {};
  int64_t j = 0;
  if (grad) {  // keep exp(l - m): the gradient needs it
    for (; j + kL <= V; j += kL)
      for (int q = 0; q < kL; ++q) {
        const A e = exp_vec(l[j + q] - m);
        l[j + q] = e;
        acc[q] += e;
      }
    for (; j < V; ++j) {
      const A e = exp_vec(l[j] - m);
      l[j] = e;
      acc[0] += e;
    }
  } else {
    for (; j + kL <= V; j += kL)
      for (int q = 0; q < kL; ++q) acc[q] += exp_vec(l[j + q] - m);
    for (; j < V; ++j) acc[0] += exp_vec(l[j] - m);
  }
  A sum = 0;
  for (int q = 0; q < kL; ++q) sum += acc[q];
  const double lse = static_cast<double>(m) + std::log(static_cast<double>(sum));
  if (grad) {
    const A scale = w / sum;
    if constexpr (std::is_same_v<L, A>) {
      for (j = 0; j < V; ++j) l[j] *= scale;
      l[t] -= w;
    } else {
      for (j = 0; j < V; ++j) low[j] = L(l[j] * scale);
      low[t] = L(l[t] * scale - w);
    }
  }
  return lse - static_cast<double>(lt);
}

template <typename T>
ops::LinearCrossEntropyResult lce_impl(const Tensor& hidden, const Tensor& weight,
                                       const Tensor& target, const Tensor& token_weight,
                                       const ops::LinearCrossEntropyOptions& o) {
  using A = acc_t<T>;
  constexpr bool kLow = !std::is_same_v<T, A>;  // bf16: dlogits rounded for the GEMMs
  const int64_t N = hidden.size(0), C = hidden.size(1), V = weight.size(0);
  const auto opts = TensorOptions(hidden.dtype()).device(hidden.device());
  const Rows rows = counted_rows(target, token_weight, V, o.ignore_index);
  const int64_t n = static_cast<int64_t>(rows.index.size());
  const bool grad = o.grad_hidden || o.grad_weight;
  ops::LinearCrossEntropyResult res;
  // Ignored rows get no gradient: zeros unless every row is counted.
  if (o.grad_hidden) res.grad_hidden = n == N ? empty({N, C}, opts) : zeros({N, C}, opts);
  if (n == 0) {
    if (o.grad_weight) res.grad_weight = zeros({V, C}, opts);
    res.loss = scalar_tensor(0.0, dtype_of_v<A>);
    return res;
  }
  const int64_t max_rows =
      o.chunk_rows > 0 ? o.chunk_rows
                       : std::max<int64_t>(1, kLogitsChunkBytes / (V * int64_t(sizeof(A))));
  const int64_t chunks = (n + max_rows - 1) / max_rows;
  const int64_t per = (n + chunks - 1) / chunks;  // balanced chunks
  // dW accumulates in A across chunks: straight into the result for f32/f64,
  // in an f32 buffer for bf16 (with more than one chunk).
  Tensor dw_acc;
  if (o.grad_weight) {
    res.grad_weight = empty({V, C}, opts);
    dw_acc = !kLow ? res.grad_weight
                   : chunks > 1 ? empty({V, C}, TensorOptions(dtype_of_v<A>)) : Tensor();
  }
  Tensor logits = empty({per, V}, TensorOptions(dtype_of_v<A>));
  Tensor low = kLow && grad ? empty({per, V}, opts) : Tensor();
  Tensor hbuf, dhbuf;  // gathered rows of a chunk whose rows are not consecutive
  const T* hp = hidden.data_ptr<T>();
  const T* wp = weight.data_ptr<T>();
  A* lp = logits.data_ptr<A>();
  std::vector<double> loss(static_cast<size_t>(n));
  for (int64_t c0 = 0, chunk = 0; c0 < n; c0 += per, ++chunk) {
    const int64_t r = std::min(per, n - c0);
    const int64_t* idx = rows.index.data() + c0;
    const bool consecutive = idx[r - 1] - idx[0] == r - 1;
    const T* hc = hp + idx[0] * C;
    if (!consecutive) {
      if (!hbuf.defined()) hbuf = empty({per, C}, opts);
      T* hb = hbuf.data_ptr<T>();
      parallel_for(0, r, 16, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i)
          std::copy(hp + idx[i] * C, hp + (idx[i] + 1) * C, hb + i * C);
      });
      hc = hb;
    }
    gemm_into<T, A>(false, true, r, V, C, hc, C, wp, C, false, lp, V);  // 1.
    using L = std::conditional_t<kLow, T, A>;  // dlogits' type
    L* dl = nullptr;
    if constexpr (kLow) {
      if (grad) dl = low.data_ptr<T>();
    } else {
      dl = lp;
    }
    parallel_for(0, r, 1, [&](int64_t lo, int64_t hi) {  // 2.
      for (int64_t i = lo; i < hi; ++i)
        loss[c0 + i] = rows.weight[c0 + i] *
                       row_loss_and_grad<A, L>(lp + i * V, V, rows.target[c0 + i],
                                               static_cast<A>(rows.weight[c0 + i]), grad,
                                               kLow && grad ? dl + i * V : nullptr);
    });
    if (o.grad_hidden) {  // 3.
      T* dh = res.grad_hidden.data_ptr<T>();
      if (consecutive) {
        gemm_into<T, T>(false, false, r, C, V, dl, V, wp, C, false, dh + idx[0] * C, C);
      } else {
        if (!dhbuf.defined()) dhbuf = empty({per, C}, opts);
        T* db = dhbuf.data_ptr<T>();
        gemm_into<T, T>(false, false, r, C, V, dl, V, wp, C, false, db, C);
        for (int64_t i = 0; i < r; ++i) std::copy(db + i * C, db + (i + 1) * C, dh + idx[i] * C);
      }
    }
    if (o.grad_weight) {  // 4.
      const bool first = chunk == 0, last = c0 + r >= n;
      if constexpr (kLow) {
        // f32 partial sums over the chunks; the last chunk's product adds
        // them and rounds to bf16 in the same pass.
        if (last) {
          gemm_bf16(true, false, V, C, r, dl, V, hc, C, false, res.grad_weight.data_ptr<T>(),
                    DType::bf16, C, first ? nullptr : dw_acc.data_ptr<A>());
        } else {
          gemm_into<T, A>(true, false, V, C, r, dl, V, hc, C, !first, dw_acc.data_ptr<A>(), C);
        }
      } else {
        gemm_into<T, A>(true, false, V, C, r, dl, V, hc, C, !first, dw_acc.data_ptr<A>(), C);
      }
    }
  }
  double total = 0;
  for (double v : loss) total += v;
  res.loss = scalar_tensor(total, dtype_of_v<A>);
  return res;
}

}  // namespace

ops::LinearCrossEntropyResult linear_cross_entropy(const Tensor& hidden, const Tensor& weight,
                                                   const Tensor& target,
                                                   const Tensor& token_weight,
                                                   const ops::LinearCrossEntropyOptions& o) {
  switch (hidden.dtype()) {
    case DType::f32: return lce_impl<float>(hidden, weight, target, token_weight, o);
    case DType::f64: return lce_impl<double>(hidden, weight, target, token_weight, o);
    case DType::bf16: {
      if (onednn::has_bf16_matmul())
        return lce_impl<BFloat16>(hidden, weight, target, token_weight, o);
      // No native bf16 GEMM: one f32 copy of each operand, not one per GEMM.
      auto r = lce_impl<float>(ops::cast(hidden, DType::f32), ops::cast(weight, DType::f32),
                               target, token_weight, o);
      if (r.grad_hidden.defined()) r.grad_hidden = ops::cast(r.grad_hidden, DType::bf16);
      if (r.grad_weight.defined()) r.grad_weight = ops::cast(r.grad_weight, DType::bf16);
      return r;
    }
    default: break;
  }
  QK_THROW(TypeError, "linear_cross_entropy: expected f32, bf16 or f64 hidden and weight, got ",
           dtype_name(hidden.dtype()));
}

}  // namespace qk::cpu
