// The CUDA backend's cross-entropy (and dropout) kernel-table entries: log_softmax along
// the class dimension (softmax_kernel), then the per-position losses and
// their f64 sum and count (loss.cu, reduce.cu). A target out of range
// raises the CPU's IndexError naming its position, when the host next
// waits for the device (deferred_checks.h): no wait of its own.
#include <cuda_runtime_api.h>

#include <cmath>

#include "cuda_check.h"
#include "deferred_checks.h"
#include "kernels.h"
#include "reduce_ops.h"
#include "stream_handle.h"
#include "op_kernel_tables.h"
#include "qk/base/error.h"
#include "qk/tensor/kernel_tables.h"
#include "qk/tensor/ops/view.h"
#include "batch_channel_spatial.h"

namespace qk::cuda {

namespace {

TensorOptions on(const Tensor& like, DType t) { return TensorOptions().dtype(t).device(like.device()); }

// The CPU's IndexError for the first bad target, raised when the host next
// waits for the device (deferred_checks.h).
void check_later(const Tensor& bad, const Tensor& target, int64_t C, int64_t ignore_index, cudaStream_t stream) {
  defer_check(bad, stream, [target, C, ignore_index](int64_t pos) {
    Tensor flat = ops::reshape(target, {target.numel()});
    const int64_t t = ops::to_device(ops::slice(flat, 0, pos, pos + 1), kCPU).item_double();
    return detail::str_cat("cross_entropy: target ", t, " at position ", pos, " is out of range for ", C,
                           " classes (and is not ignore_index ", ignore_index, ")");
  });
}

// The f64 sum of the per-position losses and the i64 count of counted positions, on the device.
std::pair<Tensor, Tensor> totals(const Tensor& per, const Tensor& counted) {
  DeviceStream ds(per.device().index);
  Tensor total = empty({1}, on(per, DType::f64)), count = empty({1}, on(per, DType::i64));
  reduce_rows_on_device(0, total, per, 1, per.numel());
  reduce_rows_on_device(0, count, counted, 1, counted.numel());
  return {total, count};
}

ops::CrossEntropyResult cross_entropy_on_device(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                                double label_smoothing, Reduction reduction) {
  DeviceStream ds(logits.device().index);
  Tensor lp = ops::softmax_kernel.get(logits.device())(logits, 1, /*log=*/true);
  const NCS d = ncs_of(logits);
  Tensor per = empty(target.shape(), on(logits, DType::f64));
  Tensor counted = empty(target.shape(), on(logits, DType::i64));
  Tensor bad = new_error_flag(logits, ds.stream());
  launch_cross_entropy_positions(per.data_ptr<double>(), counted.data_ptr<int64_t>(), lp.raw_data(),
                                 static_cast<int>(lp.dtype()), target.raw_data(), static_cast<int>(target.dtype()),
                                 d.N, d.C, d.S, ignore_index, label_smoothing, error_flag_ptr(bad), ds.stream());
  check_later(bad, target, d.C, ignore_index, ds.stream());
  if (reduction == Reduction::none) {
    Tensor loss = empty(target.shape(), on(logits, logits.dtype()));
    launch_f64_to(loss.raw_data(), static_cast<int>(loss.dtype()), per.data_ptr<double>(), per.numel(), ds.stream());
    return {loss, lp};
  }
  Tensor loss = empty({}, on(logits, logits.dtype()));
  if (per.numel() == 0) {  // no positions: sum 0, mean 0/0
    ops::fill_kernel.get(loss.device())(loss, reduction == Reduction::mean ? NAN : 0.0);
    return {loss, lp};
  }
  auto [total, count] = totals(per, counted);
  launch_cross_entropy_finish(loss.raw_data(), static_cast<int>(loss.dtype()), total.data_ptr<double>(),
                              count.data_ptr<int64_t>(), reduction == Reduction::mean, ds.stream());
  return {loss, lp};
}

Tensor cross_entropy_backward_on_device(const Tensor& grad_loss, const Tensor& log_probs, const Tensor& target,
                                        int64_t ignore_index, double label_smoothing, Reduction reduction) {
  DeviceStream ds(log_probs.device().index);
  const NCS d = ncs_of(log_probs);
  Tensor dx = empty(log_probs.shape(), on(log_probs, log_probs.dtype()));
  Tensor bad = new_error_flag(log_probs, ds.stream());
  Tensor count = empty({1}, on(log_probs, DType::i64));
  if (reduction == Reduction::mean) {
    // The counted positions: the forward's rule again (target != ignore_index).
    Tensor per = empty(target.shape(), on(log_probs, DType::f64));
    Tensor counted = empty(target.shape(), on(log_probs, DType::i64));
    launch_cross_entropy_positions(per.data_ptr<double>(), counted.data_ptr<int64_t>(), log_probs.raw_data(),
                                   static_cast<int>(log_probs.dtype()), target.raw_data(),
                                   static_cast<int>(target.dtype()), d.N, d.C, d.S, ignore_index, 0.0,
                                   static_cast<unsigned long long*>(bad.raw_data()), ds.stream());
    if (counted.numel() > 0)
      reduce_rows_on_device(0, count, counted, 1, counted.numel());
  }
  launch_cross_entropy_backward(dx.raw_data(), log_probs.raw_data(), static_cast<int>(log_probs.dtype()),
                                target.raw_data(), static_cast<int>(target.dtype()), grad_loss.raw_data(),
                                reduction == Reduction::none, count.data_ptr<int64_t>(),
                                reduction == Reduction::mean, d.N, d.C, d.S, ignore_index, label_smoothing,
                                static_cast<unsigned long long*>(bad.raw_data()), ds.stream());
  // Not read back here: the forward raised for these targets already, and a
  // read would stall the host in the middle of every backward pass. An
  // out-of-range target reaching backward alone counts as ignored.
  return dx;
}

std::pair<Tensor, Tensor> dropout_on_device(const Tensor& x, double p, uint64_t seed, uint64_t offset,
                                            const Tensor& offset_base) {
  DeviceStream ds(x.device().index);
  Tensor out = empty(x.shape(), on(x, x.dtype())), mask = empty(x.shape(), on(x, x.dtype()));
  launch_dropout(out.raw_data(), mask.raw_data(), x.raw_data(), static_cast<int>(x.dtype()), x.numel(), p, seed,
                 offset, offset_base.defined() ? static_cast<const int64_t*>(offset_base.raw_data()) : nullptr,
                 ds.stream());
  return {out, mask};
}

[[maybe_unused]] const bool registered = [] {
  ops::dropout_kernel.set(DeviceType::cuda, &dropout_on_device);
  ops::cross_entropy_kernel.set(DeviceType::cuda, &cross_entropy_on_device);
  ops::cross_entropy_backward_kernel.set(DeviceType::cuda, &cross_entropy_backward_on_device);
  return true;
}();

}  // namespace

}  // namespace qk::cuda
