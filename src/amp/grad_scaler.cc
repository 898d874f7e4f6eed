// GradScaler: torch's protocol (scale, unscale_, step, update) over the one
// loss-scale state machine, optim::DynamicLossScaler, set up as torch sets
// its scaler.
#include "qk/amp/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "qk/autograd/functions.h"
#include "qk/base/error.h"
#include "qk/optim/grad_unscale.h"

namespace qk::amp {

namespace {

optim::DynamicLossScaler make_scaler(const GradScalerOptions& o) {
  QK_CHECK(o.init_scale > 0 && o.init_scale <= std::numeric_limits<float>::max(),
           "GradScaler: init_scale must be positive and finite in f32, got ", o.init_scale);
  QK_CHECK(o.growth_factor > 1.0, "GradScaler: growth_factor must be > 1, got ", o.growth_factor);
  QK_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1.0, "GradScaler: backoff_factor must be in (0, 1), got ",
           o.backoff_factor);
  QK_CHECK(o.growth_interval > 0, "GradScaler: growth_interval must be positive, got ", o.growth_interval);
  optim::DynamicLossScalerOptions d = optim::torch_grad_scaler_options();
  d.initial_scale = static_cast<float>(o.init_scale);
  d.min_scale = std::min(d.min_scale, d.initial_scale);
  d.growth_factor = static_cast<float>(o.growth_factor);
  d.backoff_factor = static_cast<float>(o.backoff_factor);
  d.growth_interval = o.growth_interval;
  return optim::DynamicLossScaler(d);
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions opts) : opts_(opts), scaler_(make_scaler(opts)) {}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!opts_.enabled) return loss;
  return qk::mul(loss, static_cast<double>(scaler_.scale()));
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!opts_.enabled) return;
  QK_CHECK(!unscaled_,
           "GradScaler.unscale_: already called since the last update(); call it at most once "
           "per step");
  const double inv = 1.0 / static_cast<double>(scaler_.scale());
  bool bad = false;
  std::vector<Tensor> on_devices;
  for (const Tensor& p : opt.all_params()) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    if (g.device().is_cpu()) bad |= optim::unscale_and_check(g, inv);
    else on_devices.push_back(g);
  }
  if (!on_devices.empty()) bad |= optim::unscale_and_check_on_device(on_devices, inv, false).found_inf;
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
  scaler_.update(found_inf_);
  unscaled_ = false;
  found_inf_ = false;
}

std::map<std::string, double> GradScaler::state_dict() const {
  return {{"scale", scaler_.scale()},
          {"growth_tracker", static_cast<double>(scaler_.growth_tracker())},
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
  GradScalerOptions o = opts_;
  o.init_scale = get("scale");
  o.growth_factor = get("growth_factor");
  o.backoff_factor = get("backoff_factor");
  o.growth_interval = static_cast<int64_t>(get("growth_interval"));
  o.enabled = get("enabled") != 0.0;
  optim::DynamicLossScaler s = make_scaler(o);  // checks every value before anything changes
  s.load_state_dict({{"scale", o.init_scale}, {"growth_tracker", get("growth_tracker")}});
  opts_ = o;
  scaler_ = s;
  unscaled_ = false;
  found_inf_ = false;
}

}  // namespace qk::amp
