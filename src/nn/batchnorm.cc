#include "qk/nn/batchnorm.h"

#include "qk/autograd/functions.h"
#include "qk/nn/init.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/view.h"

namespace qk::nn {

BatchNorm2dImpl::BatchNorm2dImpl(const BatchNormOptions& o) : options(o) {
  QK_CHECK(o.num_features() > 0, "BatchNorm2d: expected num_features > 0, got ", o.num_features());
  const int64_t c = o.num_features();
  weight = register_parameter("weight", o.affine() ? empty({c}) : Tensor());
  bias = register_parameter("bias", o.affine() ? empty({c}) : Tensor());
  if (o.track_running_stats()) {
    running_mean = register_buffer("running_mean", zeros({c}));
    running_var = register_buffer("running_var", ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::i64));
  }
  reset_parameters();
}

void BatchNorm2dImpl::reset_running_stats() {
  if (!options.track_running_stats()) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  init::zeros_(num_batches_tracked);
}

void BatchNorm2dImpl::reset_parameters() {
  reset_running_stats();
  if (options.affine()) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

Tensor BatchNorm2dImpl::forward(const Tensor& x) {
  QK_CHECK(x.dim() == 4 && x.size(1) == options.num_features(), "BatchNorm2d: expected input [N, ",
           options.num_features(), ", H, W], got shape ", shape_str(x.shape()));
  double momentum = options.momentum().value_or(0.0);
  if (is_training() && options.track_running_stats()) {
    if (options.momentum()) {
      // Counted where it lives: reading it back would stall a GPU once per
      // layer and step.
      ops::binary_scalar_(BinaryOp::add, num_batches_tracked, 1.0);
    } else {
      // Without a momentum the running stats are the cumulative average,
      // whose weight the host needs.
      const int64_t n = num_batches_tracked.item<int64_t>() + 1;
      num_batches_tracked.fill_(static_cast<double>(n));
      momentum = 1.0 / static_cast<double>(n);
    }
    num_batches_tracked.bump_version();
  }
  if (is_training() && training_forward) return training_forward(*this, x, momentum);
  // Batch statistics in training, or when there are no running ones to use.
  const bool use_batch_stats = is_training() || !options.track_running_stats();
  const bool pass_running = !is_training() || options.track_running_stats();
  return qk::batch_norm(x, weight, bias, pass_running ? running_mean : Tensor(),
                    pass_running ? running_var : Tensor(), use_batch_stats, momentum, options.eps());
}

void BatchNorm2dImpl::pretty_print(std::ostream& os) const {
  os << "BatchNorm2d(" << options.num_features() << ", eps=" << options.eps() << ", momentum=";
  if (options.momentum()) os << *options.momentum(); else os << "None";
  os << ", affine=" << (options.affine() ? "true" : "false")
     << ", track_running_stats=" << (options.track_running_stats() ? "true" : "false") << ")";
}

}  // namespace qk::nn
