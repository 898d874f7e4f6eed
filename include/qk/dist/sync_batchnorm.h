// SyncBatchNorm: batch statistics over every rank's batch, as
// torch.nn.SyncBatchNorm.
//
//   qk::dist::init();
//   auto model = qk::models::ResNet18();
//   int n = qk::dist::convert_sync_batchnorm(*model, qk::dist::group());  // before DDP
//   qk::dist::DistributedDataParallel ddp(model.ptr(), qk::dist::group());
//   ... train as usual: each BatchNorm2d now normalises with the mean and
//   variance of the global batch (all ranks' samples together).
//
// Models hold their BatchNorm2d members by type, so the modules are not
// replaced: convert_sync_batchnorm installs BatchNorm2dImpl::training_forward
// (the hook nn offers) on each. In training mode the hooked forward
//   1. takes each channel's local count, sum and sum of squares,
//   2. all-reduces them (one f64 collective of 2C + 1 values),
//   3. normalises with the global mean and biased variance, then weight/bias,
//   4. blends the global mean and unbiased variance into the running stats
//      with the momentum, so every rank's buffers stay equal.
// Backward (see Note [SyncBatchNorm backward] in sync_batchnorm.cc) all-reduces
// each channel's sum(dy) and sum(dy * xhat) and forms grad_input from them;
// grad_weight and grad_bias stay local, as PyTorch's, and DDP averages them.
// Eval mode uses the running stats and talks to no one.
//
// Every rank must run the same BatchNorm layers in the same order (each
// forward and backward is a collective). The process group must outlive the
// model's training use. One rank is allowed: the collectives are then no-ops.
#pragma once

#include "qk/dist/process_group.h"
#include "qk/nn/batchnorm.h"

namespace qk::dist {

// Installs the synced training forward on every BatchNorm2d in `root` and its
// descendants; returns how many. Calling it again re-targets them to `pg`.
int convert_sync_batchnorm(nn::Module& root, ProcessGroup& pg);

// The synced training-mode batch norm itself, differentiable. x [N, C, ...]
// (N may differ by rank, 0 included); weight/bias [C] or undefined; running
// stats [C] or undefined, updated in place. Collective.
Tensor sync_batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       const Tensor& running_mean, const Tensor& running_var, double momentum,
                       double eps, ProcessGroup& pg);

}  // namespace qk::dist
