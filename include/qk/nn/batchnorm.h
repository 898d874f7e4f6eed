// BatchNorm2d over NCHW input, with running statistics.
//
//   qk::nn::BatchNorm2d bn(32);                  // weight 1, bias 0, running_mean 0, running_var 1
//   y = bn(x);                                   // training: batch stats, updates running stats
//   bn->eval();  y = bn(x);                      // eval: running stats
//
// Buffers: running_mean [C], running_var [C] (unbiased batch variance is
// blended in with `momentum`), num_batches_tracked (i64 scalar). With
// momentum unset (std::nullopt) the running stats are a cumulative average.
//
// training_forward, when set, takes over the training-mode forward: how
// qk::dist::convert_sync_batchnorm (qk/dist/sync_batchnorm.h) makes the batch
// statistics span every rank without nn knowing of process groups.
#pragma once

#include <functional>
#include <optional>

#include "qk/nn/arg.h"
#include "qk/nn/module.h"

namespace qk::nn {

struct BatchNormOptions {
  /* implicit */ BatchNormOptions(int64_t num_features) : num_features_(num_features) {}
  QK_ARG(int64_t, num_features);
  QK_ARG(double, eps) = 1e-5;
  QK_ARG(std::optional<double>, momentum) = 0.1;
  QK_ARG(bool, affine) = true;
  QK_ARG(bool, track_running_stats) = true;
};

class BatchNorm2dImpl : public Module {
 public:
  explicit BatchNorm2dImpl(int64_t num_features) : BatchNorm2dImpl(BatchNormOptions(num_features)) {}
  explicit BatchNorm2dImpl(const BatchNormOptions& options);
  void reset_running_stats();
  void reset_parameters();
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  BatchNormOptions options;
  Tensor weight, bias;                                    // [C], absent unless affine
  Tensor running_mean, running_var, num_batches_tracked;  // absent unless track_running_stats

  // Called in training mode instead of the local batch_norm, after
  // num_batches_tracked was bumped, with the momentum to blend the running
  // stats with (1/n for a cumulative average); it must update them itself.
  using TrainingForward =
      std::function<Tensor(BatchNorm2dImpl& bn, const Tensor& x, double momentum)>;
  TrainingForward training_forward;
};
QK_MODULE(BatchNorm2d);

}  // namespace qk::nn
