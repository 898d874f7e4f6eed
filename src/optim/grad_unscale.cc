// The unscale passes of loss scaling: a fused loop over a CPU gradient, and
// the devices' own kernels with one read back per device.
#include "qk/optim/grad_unscale.h"

#include <atomic>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "qk/base/error.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/dtype.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"

namespace qk::optim {

bool unscale_and_check(const Tensor& g, double inv) {
  QK_CHECK(g.is_contiguous() && g.device().is_cpu(), "unscale_and_check: gradients must be contiguous CPU tensors");
  std::atomic<bool> bad{false};
  dispatch_floating(g.dtype(), "unscale_and_check", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    T* p = g.data_ptr<T>();
    const C k = static_cast<C>(inv);
    parallel_for(0, g.numel(), 1 << 15, [&](int64_t lo, int64_t hi) {
      bool local = false;
      for (int64_t i = lo; i < hi; ++i) {
        C v = static_cast<C>(p[i]);
        local |= !std::isfinite(v);
        p[i] = cast_value<T>(v * k);
      }
      if (local) bad.store(true, std::memory_order_relaxed);
    });
  });
  g.bump_version();
  return bad.load();
}

// Per device: g * 0 is NaN where g is inf or NaN and 0 elsewhere, so the sum
// of those over every gradient is finite exactly when all of them are; the
// squares are summed in f64 as the CPU passes sum them. One read back (two
// with squares) per device: one per gradient would stall the device once
// per parameter.
DeviceUnscaleResult unscale_and_check_on_device(const std::vector<Tensor>& grads, double inv, bool squares) {
  std::map<std::string, std::pair<Tensor, Tensor>> sums;  // device -> (probe, squares)
  auto plus = [](const Tensor& a, const Tensor& b) { return a.defined() ? ops::add(a, b) : b; };
  for (const Tensor& g : grads) {
    auto& [probe, sq] = sums[g.device().str()];
    probe = plus(probe, ops::sum(ops::binary_scalar(BinaryOp::mul, ops::cast(g, DType::f64), 0.0)));
    if (inv != 1.0) {
      if (g.dtype() == DType::f16 || g.dtype() == DType::bf16) {
        // In f32 as the CPU path: 1/scale in the gradient's own dtype would
        // round (f16: to 0 from a scale of 2^25; bf16: 8 bits for any scale).
        ops::copy_(g, ops::binary_scalar(BinaryOp::mul, ops::cast(g, DType::f32), inv));
      } else {
        ops::mul_(g, inv);
      }
      g.bump_version();
    }
    if (squares) {
      const Tensor g64 = ops::cast(g, DType::f64);
      sq = plus(sq, ops::sum(ops::mul(g64, g64)));
    }
  }
  DeviceUnscaleResult r;
  for (const auto& [device, s] : sums) {
    r.found_inf = r.found_inf || !std::isfinite(s.first.item_double());
    if (squares) r.sum_squares += s.second.item_double();
  }
  return r;
}

}  // namespace qk::optim
