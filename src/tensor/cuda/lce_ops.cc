// The CUDA backend's fused output layer + cross entropy (the
// linear_cross_entropy kernel table), the CPU kernel's steps per chunk of
// rows (src/tensor/cpu/linear_cross_entropy.cc):
//   1. logits [r, V] = h_c . W^T in f32 (f64 for f64), cuBLASLt
//   2. per row the loss and, for gradients, dlogits (lce.cu), rounded to
//      bf16 for steps 3-4 with bf16 inputs, as the CPU's
//   3. dh_c = dlogits . W
//   4. dW (+)= dlogits^T . h_c, accumulated in f32 over the chunks
// Unlike the CPU kernel, ignored rows are computed (weight 0, zero
// gradient rows) rather than gathered out: no host copy of the targets.
// An out-of-range target raises IndexError before any product, the CPU's
// message (one read back of a device flag per call).
#include <cuda_runtime_api.h>

#include <algorithm>

#include "cuda_check.h"
#include "deferred_checks.h"
#include "gemm.h"
#include "lce_kernels.h"
#include "kernels.h"
#include "reduce_ops.h"
#include "op_kernel_tables.h"
#include "stream_handle.h"
#include "qk/base/error.h"
#include "qk/tensor/kernel_tables.h"
#include "qk/tensor/ops/view.h"

namespace qk::cuda {

namespace {

constexpr int64_t kLogitsChunkBytes = int64_t{64} << 20;  // as the CPU's Note [Chunk size]

TensorOptions on(const Tensor& like, DType t) { return TensorOptions().dtype(t).device(like.device()); }

// Targets out of range (and not ignore_index) raise the CPU's IndexError
// when the host next waits for the device (deferred_checks.h).
void check_targets(const Tensor& target, int64_t V, int64_t ignore_index, cudaStream_t stream) {
  Tensor bad = new_error_flag(target, stream);
  launch_lce_check_targets(target.raw_data(), static_cast<int>(target.dtype()), target.numel(), V, ignore_index,
                           error_flag_ptr(bad), stream);
  defer_check(bad, stream, [target, V, ignore_index](int64_t row) {
    const int64_t t = ops::to_device(ops::slice(target, 0, row, row + 1), kCPU).item_double();
    return detail::str_cat("linear_cross_entropy: target ", t, " at row ", row,
                           " is out of range for a vocabulary of ", V, " (and is not ignore_index ", ignore_index, ")");
  });
}

ops::LinearCrossEntropyResult lce_on_device(const Tensor& hidden, const Tensor& weight, const Tensor& target,
                                            const Tensor& token_weight, const ops::LinearCrossEntropyOptions& o) {
  const DType dt = hidden.dtype();
  QK_CHECK_TYPE(dt == DType::f32 || dt == DType::bf16 || dt == DType::f64,
                "linear_cross_entropy: expected f32, bf16 or f64 hidden and weight, got ", dtype_name(dt));
  const int64_t N = hidden.size(0), C = hidden.size(1), V = weight.size(0);
  const DType acc = dt == DType::f64 ? DType::f64 : DType::f32;
  const bool low = dt == DType::bf16;  // dlogits rounded to bf16 for the products
  const bool grad = o.grad_hidden || o.grad_weight;
  DeviceStream ds(hidden.device().index);
  check_targets(target, V, o.ignore_index, ds.stream());

  ops::LinearCrossEntropyResult res;
  if (o.grad_hidden) res.grad_hidden = empty({N, C}, on(hidden, dt));
  Tensor dw_acc;
  if (o.grad_weight) dw_acc = empty({V, C}, on(hidden, acc));
  Tensor loss_rows = empty({N}, on(hidden, DType::f64));
  const int64_t logit_bytes = static_cast<int64_t>(dtype_size(acc));
  const int64_t per = o.chunk_rows > 0
                          ? o.chunk_rows
                          : std::max<int64_t>(1, kLogitsChunkBytes / std::max<int64_t>(V * logit_bytes, 1));
  Tensor logits, dl_low;
  const Tensor wt = ops::transpose(weight, 0, 1);
  bool first = true;
  for (int64_t r0 = 0; r0 < N; r0 += per) {
    const int64_t r = std::min(per, N - r0);
    if (!logits.defined()) logits = empty({std::min(per, N), V}, on(hidden, acc));
    if (low && grad && !dl_low.defined()) dl_low = empty({std::min(per, N), V}, on(hidden, dt));
    Tensor lc = ops::slice(logits, 0, 0, r);
    Tensor hc = ops::slice(hidden, 0, r0, r0 + r);
    gemm(lc, hc, wt, 1);  // 1.
    Tensor dl = low && grad ? ops::slice(dl_low, 0, 0, r) : lc;
    const Tensor tc = ops::slice(target, 0, r0, r0 + r);
    const Tensor wc = token_weight.defined() ? ops::slice(token_weight, 0, r0, r0 + r) : Tensor();
    launch_lce_rows(lc.raw_data(), static_cast<int>(acc), tc.raw_data(), static_cast<int>(target.dtype()),
                    wc.defined() ? wc.raw_data() : nullptr, wc.defined() ? static_cast<int>(wc.dtype()) : 0, r, V,
                    o.ignore_index, grad, loss_rows.data_ptr<double>() + r0, low && grad ? dl.raw_data() : nullptr,
                    static_cast<int>(dt), ds.stream());  // 2.
    if (o.grad_hidden) gemm(ops::slice(res.grad_hidden, 0, r0, r0 + r), dl, weight, 1);  // 3.
    if (o.grad_weight) {  // 4.
      gemm(dw_acc, ops::transpose(dl, 0, 1), hc, 1, /*accumulate=*/!first);
      first = false;
    }
  }
  if (o.grad_weight) {
    if (N == 0) ops::fill_kernel.get(dw_acc.device())(dw_acc, 0.0);
    res.grad_weight = dt == acc ? dw_acc : ops::cast(dw_acc, dt);
  }
  Tensor total = empty({1}, on(hidden, DType::f64));
  if (N > 0) reduce_rows_on_device(0, total, loss_rows, 1, N);
  else ops::fill_kernel.get(total.device())(total, 0.0);
  res.loss = ops::cast(ops::reshape(total, {}), acc);
  return res;
}

[[maybe_unused]] const bool registered = [] {
  ops::linear_cross_entropy_kernel.set(DeviceType::cuda, &lce_on_device);
  return true;
}();

}  // namespace

}  // namespace qk::cuda
