// Megatron's loss-scale bookkeeping, in f32 as its CUDA tensors hold it.
#include "qk/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "qk/base/error.h"

namespace qk::optim {

LossScaler::LossScaler(float initial_scale) : scale_(initial_scale) {
  QK_CHECK_AS(ValueError, initial_scale > 0 && std::isfinite(initial_scale),
              "Loss scale must be positive and finite, got ", initial_scale);
}

ConstantLossScaler::ConstantLossScaler(float scale) : LossScaler(scale) {}

DynamicLossScalerOptions torch_grad_scaler_options() {
  return {.initial_scale = 65536.0f,
          .min_scale = std::numeric_limits<float>::min(),
          .growth_factor = 2.0f,
          .backoff_factor = 0.5f,
          .growth_interval = 2000,
          .hysteresis = 1};
}

DynamicLossScaler::DynamicLossScaler(DynamicLossScalerOptions o)
    : LossScaler(o.initial_scale), o_(o), hysteresis_tracker_(o.hysteresis) {
  QK_CHECK_AS(ValueError, o.min_scale > 0 && o.min_scale <= o.initial_scale,
              "min_scale (--min-loss-scale) must be in (0, initial scale ", o.initial_scale, "], got ", o.min_scale);
  QK_CHECK_AS(ValueError, o.growth_factor > 1, "Loss scale growth factor must be > 1, got ", o.growth_factor);
  QK_CHECK_AS(ValueError, o.backoff_factor > 0 && o.backoff_factor < 1,
              "Loss scale backoff factor must be in (0, 1), got ", o.backoff_factor);
  QK_CHECK_AS(ValueError, o.growth_interval > 0, "growth_interval (--loss-scale-window) must be > 0, got ",
              o.growth_interval);
  QK_CHECK_AS(ValueError, o.hysteresis > 0, "hysteresis (--hysteresis) must be > 0, got ", o.hysteresis);
}

void DynamicLossScaler::update(bool found_inf) {
  if (found_inf) {
    growth_tracker_ = 0;
    hysteresis_tracker_ -= 1;
    if (hysteresis_tracker_ <= 0) scale_ = std::max(scale_ * o_.backoff_factor, o_.min_scale);
    return;
  }
  growth_tracker_ += 1;
  if (growth_tracker_ == o_.growth_interval) {
    growth_tracker_ = 0;
    hysteresis_tracker_ = o_.hysteresis;
    // Megatron would let the f32 scale overflow to inf (a run of 2^96 clean
    // windows); it stays at the largest finite power instead.
    const float grown = scale_ * o_.growth_factor;
    if (std::isfinite(grown)) scale_ = grown;
  }
}

std::map<std::string, double> DynamicLossScaler::state_dict() const {
  return {{"scale", scale_},
          {"growth_tracker", static_cast<double>(growth_tracker_)},
          {"hysteresis_tracker", static_cast<double>(hysteresis_tracker_)}};
}

void DynamicLossScaler::load_state_dict(const std::map<std::string, double>& state) {
  auto get = [&](const char* k) {
    const auto it = state.find(k);
    QK_CHECK_AS(IoError, it != state.end(), "Loss scaler state: '", k, "' is missing from the checkpoint");
    return it->second;
  };
  const double s = get("scale");
  QK_CHECK_AS(IoError, s > 0 && s <= std::numeric_limits<float>::max(), "Loss scaler state: bad scale ", s);
  scale_ = static_cast<float>(s);
  growth_tracker_ = static_cast<int64_t>(get("growth_tracker"));
  // Checkpoints of torch-style scalers (amp::GradScaler) carry no hysteresis.
  const auto h = state.find("hysteresis_tracker");
  hysteresis_tracker_ = h == state.end() ? o_.hysteresis : static_cast<int64_t>(h->second);
}

}  // namespace qk::optim
