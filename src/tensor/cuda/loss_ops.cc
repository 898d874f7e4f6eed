// The CUDA backend's cross-entropy (and dropout) kernel-table entries: log_softmax along
// the class dimension (softmax_kernel), then the per-position losses and
// their f64 sum and count (loss.cu, reduce.cu). A target out of range
// raises IndexError naming its position in the forward, as on the CPU;
// finding it costs one 8-byte read back per forward call (the loss's own
// .item() waits for the device anyway).
#include <cuda_runtime_api.h>

#include <cmath>

#include "cuda_check.h"
#include "kernels.h"
#include "reduce_ops.h"
#include "stream_handle.h"
#include "op_kernel_tables.h"
#include "qk/base/error.h"
#include "qk/tensor/sync_debug.h"
#include "qk/tensor/kernel_tables.h"
#include "qk/tensor/ops/view.h"
#include "batch_channel_spatial.h"

namespace qk::cuda {

namespace {

TensorOptions on(const Tensor& like, DType t) { return TensorOptions().dtype(t).device(like.device()); }

// A device counter for the first bad target, set to "none" (all ones: atomicMin).
Tensor bad_flag(const Tensor& like) {
  DeviceStream ds(like.device().index);
  Tensor bad = empty({1}, on(like, DType::i64));
  QK_CUDA_CHECK(cudaMemsetAsync(bad.raw_data(), 0xff, sizeof(int64_t), ds.stream()));
  return bad;
}

void raise_if_bad(const Tensor& bad, const Tensor& target, int64_t C, int64_t ignore_index) {
  DeviceStream ds(bad.device().index);
  uint64_t first = 0;
  note_host_sync(bad.device(), "cross_entropy's target check");
  QK_CUDA_CHECK(cudaMemcpyAsync(&first, bad.raw_data(), sizeof first, cudaMemcpyDeviceToHost, ds.stream()));
  QK_CUDA_CHECK(cudaStreamSynchronize(ds.stream()));
  if (first == ~uint64_t(0)) return;
  const int64_t pos = static_cast<int64_t>(first) - 1;
  Tensor flat = ops::reshape(target, {target.numel()});
  const int64_t t = ops::to_device(ops::slice(flat, 0, pos, pos + 1), kCPU).item_double();
  QK_THROW(IndexError, "cross_entropy: target ", t, " at position ", pos, " is out of range for ", C,
           " classes (and is not ignore_index ", ignore_index, ")");
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
  Tensor bad = bad_flag(logits);
  launch_cross_entropy_positions(per.data_ptr<double>(), counted.data_ptr<int64_t>(), lp.raw_data(),
                                 static_cast<int>(lp.dtype()), target.raw_data(), static_cast<int>(target.dtype()),
                                 d.N, d.C, d.S, ignore_index, label_smoothing,
                                 static_cast<unsigned long long*>(bad.raw_data()), ds.stream());
  raise_if_bad(bad, target, d.C, ignore_index);
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
  Tensor bad = bad_flag(log_probs);
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

std::pair<Tensor, Tensor> dropout_on_device(const Tensor& x, double p, uint64_t seed, uint64_t offset) {
  DeviceStream ds(x.device().index);
  Tensor out = empty(x.shape(), on(x, x.dtype())), mask = empty(x.shape(), on(x, x.dtype()));
  launch_dropout(out.raw_data(), mask.raw_data(), x.raw_data(), static_cast<int>(x.dtype()), x.numel(), p, seed,
                 offset, ds.stream());
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
