// GradScaler: one fused pass per gradient (multiply by 1/scale, look for
// non-finite values), then the skip/backoff/growth bookkeeping.
#include "qk/amp/grad_scaler.h"

#include <atomic>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "qk/base/error.h"
#include "qk/base/thread_pool.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/dtype.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"

namespace qk::amp {

namespace {

// g *= inv in place; true if any element of g (before scaling) is inf/NaN.
bool unscale_and_check(const Tensor& g, double inv) {
  QK_CHECK(g.is_contiguous(), "GradScaler: gradients must be contiguous");
  std::atomic<bool> bad{false};
  dispatch_floating(g.dtype(), "GradScaler.unscale_", [&](auto tag) {
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

}  // namespace

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

GradScaler::GradScaler(GradScalerOptions opts) : opts_(opts), scale_(opts.init_scale) {
  QK_CHECK(opts.init_scale > 0 && std::isfinite(opts.init_scale),
           "GradScaler: init_scale must be positive and finite, got ", opts.init_scale);
  QK_CHECK(opts.growth_factor > 1.0, "GradScaler: growth_factor must be > 1, got ",
           opts.growth_factor);
  QK_CHECK(opts.backoff_factor > 0 && opts.backoff_factor < 1.0,
           "GradScaler: backoff_factor must be in (0, 1), got ", opts.backoff_factor);
  QK_CHECK(opts.growth_interval > 0, "GradScaler: growth_interval must be positive, got ",
           opts.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!opts_.enabled) return loss;
  return qk::mul(loss, scale_);
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!opts_.enabled) return;
  QK_CHECK(!unscaled_,
           "GradScaler.unscale_: already called since the last update(); call it at most once "
           "per step");
  const double inv = 1.0 / scale_;
  bool bad = false;
  std::vector<Tensor> on_devices;
  for (const Tensor& p : opt.all_params()) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    if (g.device().is_cpu()) bad |= unscale_and_check(g, inv);
    else on_devices.push_back(g);
  }
  if (!on_devices.empty()) bad |= unscale_and_check_on_device(on_devices, inv, false).found_inf;
  found_inf_ = bad;
  unscaled_ = true;
}

bool GradScaler::step(optim::Optimizer& opt) {
  if (!opts_.enabled) {
    opt.step();
    return true;
  }
  if (!unscaled_) unscale_(opt);
  if (found_inf_) return false;  // the caller sees found_inf() and may log it
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!opts_.enabled) return;
  QK_CHECK(unscaled_, "GradScaler.update: no step() or unscale_() since the last update()");
  if (found_inf_) {
    scale_ *= opts_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ >= opts_.growth_interval) {
    // Past f32's range the scale would itself become inf.
    if (std::isfinite(scale_ * opts_.growth_factor)) scale_ *= opts_.growth_factor;
    growth_tracker_ = 0;
  }
  unscaled_ = false;
  found_inf_ = false;
}

std::map<std::string, double> GradScaler::state_dict() const {
  return {{"scale", scale_},
          {"growth_tracker", static_cast<double>(growth_tracker_)},
          {"growth_factor", opts_.growth_factor},
          {"backoff_factor", opts_.backoff_factor},
          {"growth_interval", static_cast<double>(opts_.growth_interval)},
          {"enabled", opts_.enabled ? 1.0 : 0.0}};
}

void GradScaler::load_state_dict(const std::map<std::string, double>& state) {
  auto get = [&](const char* k) {
    auto it = state.find(k);
    QK_CHECK(it != state.end(), "GradScaler.load_state_dict: missing '", k, "'");
    return it->second;
  };
  double s = get("scale");
  QK_CHECK(s > 0 && std::isfinite(s), "GradScaler.load_state_dict: bad scale ", s);
  scale_ = s;
  growth_tracker_ = static_cast<int64_t>(get("growth_tracker"));
  opts_.growth_factor = get("growth_factor");
  opts_.backoff_factor = get("backoff_factor");
  opts_.growth_interval = static_cast<int64_t>(get("growth_interval"));
  opts_.enabled = get("enabled") != 0.0;
  unscaled_ = false;
  found_inf_ = false;
}

}  // namespace qk::amp
