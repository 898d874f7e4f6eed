// The unscale passes of loss scaling: a fused loop over a CPU gradient, and
// the devices' own kernels with one read back per device.
#include "qk/optim/grad_unscale.h"

#include "grad_kernels.h"

#include <atomic>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "qk/base/error.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/dtype.h"
#include "qk/tensor/ops/optimizer.h"
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

// One multi-tensor pass per device (ops::multi_tensor_unscale_norm_) and one
// read back of its two sums per device: a read per gradient would stall the
// device once per parameter.
DeviceUnscaleResult unscale_and_check_on_device(const std::vector<Tensor>& grads, double inv, bool squares) {
  std::map<std::string, std::vector<Tensor>> by_device;
  for (const Tensor& g : grads) by_device[g.device().str()].push_back(g);
  DeviceUnscaleResult r;
  for (const auto& [device, gs] : by_device) {
    const Tensor sums = ops::to_device(ops::multi_tensor_unscale_norm_(gs, inv), kCPU);
    const double* d = sums.data_ptr<double>();
    r.found_inf = r.found_inf || d[1] > 0;
    if (squares) r.sum_squares += d[0];
  }
  return r;
}

DeviceUnscaleResult unscale_check_and_norm(const std::vector<Tensor>& grads, double inv) {
  const kernels::UnscaleResult r = kernels::unscale_check_and_norm(grads, static_cast<float>(inv));
  return {r.found_inf, r.sum_squares};
}

}  // namespace qk::optim
