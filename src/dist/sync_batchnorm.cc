// SyncBatchNorm: the forward reduces per-channel moments over the group, then
// normalises with the existing batch-norm kernel in "eval" form (given mean
// and variance); the backward reuses the eval-form backward kernel for the
// local sums and adds the global correction terms.
#include "qk/dist/sync_batchnorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "qk/autograd/autocast.h"
#include "qk/autograd/autograd.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/norm.h"
#include "qk/tensor/ops/view.h"

namespace qk::dist {

namespace {

using V = std::vector<Tensor>;

// One value per channel as [1, C, 1, ...], to broadcast against x [N, C, ...].
Tensor per_channel(const std::vector<double>& v, const Tensor& x) {
  Shape s(static_cast<size_t>(x.dim()), 1);
  s[1] = static_cast<int64_t>(v.size());
  return from_vector<double>(v, s, TensorOptions(x.dtype()).device(x.device()));
}

DType stat_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// This rank's per-channel [sum (C), sum of squares (C), count (1)], in f64.
// The moments come from the batch-norm kernel (shifted sums, accurate for a
// large mean); its normalised output is a by-product we drop.
std::vector<double> local_moments(const Tensor& x, double eps) {
  const int64_t C = x.size(1);
  const int64_t count = C == 0 ? 0 : x.numel() / C;
  std::vector<double> packed(static_cast<size_t>(2 * C + 1), 0.0);
  packed[2 * C] = static_cast<double>(count);
  if (count == 0) return packed;  // an empty shard adds nothing
  std::vector<double> mean(C), var(C, 0.0);
  if (count == 1) {
    mean = ops::contiguous(x).to_vector<double>();  // [1, C, 1, ...]: one value per channel
  } else {
    auto r = ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), /*training=*/true, 0.0, eps);
    mean = r.save_mean.to_vector<double>();
    auto invstd = r.save_invstd.to_vector<double>();
    for (int64_t c = 0; c < C; ++c) var[c] = std::max(0.0, 1.0 / (invstd[c] * invstd[c]) - eps);
  }
  for (int64_t c = 0; c < C; ++c) {
    packed[c] = count * mean[c];
    packed[C + c] = count * (var[c] + mean[c] * mean[c]);
  }
  return packed;
}

// Blends the global batch moments into the running stats, as PyTorch
// (unbiased variance for running_var).
void update_running(const Tensor& running_mean, const Tensor& running_var,
                    const std::vector<double>& mean, const std::vector<double>& var, double count,
                    double momentum) {
  NoGradGuard no_grad;
  const auto C = static_cast<int64_t>(mean.size());
  if (running_mean.defined()) {
    auto rm = running_mean.to_vector<double>();
    for (int64_t c = 0; c < C; ++c) rm[c] = (1 - momentum) * rm[c] + momentum * mean[c];
    ops::copy_(running_mean, from_vector<double>(rm, {C}, DType::f64));
    running_mean.bump_version();
  }
  if (running_var.defined()) {
    auto rv = running_var.to_vector<double>();
    for (int64_t c = 0; c < C; ++c)
      rv[c] = (1 - momentum) * rv[c] + momentum * var[c] * count / (count - 1);
    ops::copy_(running_var, from_vector<double>(rv, {C}, DType::f64));
    running_var.bump_version();
  }
}

}  // namespace

Tensor sync_batch_norm(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                       const Tensor& running_mean, const Tensor& running_var, double momentum,
                       double eps, ProcessGroup& pg) {
  const Tensor x = autocast::to_f32(x_in);
  QK_CHECK(x.dim() >= 2, "sync_batch_norm: expected an input [N, C, ...] with at least 2 dims, got ",
           shape_str(x.shape()));
  QK_CHECK(eps > 0, "sync_batch_norm: eps must be > 0, got ", eps);
  const int64_t C = x.size(1);

  // x [N, C, ...] -> global mean, var [C]: one all-reduce of 2C + 1 doubles.
  Tensor packed = from_vector<double>(local_moments(x, eps), {2 * C + 1}, DType::f64);
  pg.all_reduce(packed);
  const auto g = packed.to_vector<double>();
  const double count = g[2 * C];
  QK_CHECK(count > 1, "sync_batch_norm: expected more than 1 value per channel over all ",
           pg.size(), " ranks when training, got ", count, " (this rank's input ",
           shape_str(x.shape()), ")");
  std::vector<double> mean(C), var(C);
  for (int64_t c = 0; c < C; ++c) {
    mean[c] = g[c] / count;
    var[c] = std::max(0.0, g[C + c] / count - mean[c] * mean[c]);
  }

  // The kernel's eval form normalises with the mean/var we pass (biased var,
  // as in training); save_mean/save_invstd come back for the backward.
  const DType sdt = stat_dtype(x.dtype());
  const TensorOptions sopt = TensorOptions(sdt).device(x.device());
  auto r = ops::batch_norm(x, weight, bias, from_vector<double>(mean, {C}, sopt),
                           from_vector<double>(var, {C}, sopt), /*training=*/false, 0.0, eps);
  update_running(running_mean, running_var, mean, var, count, momentum);

  if (autograd::needs_grad({x, weight, bias})) {
    // Note [SyncBatchNorm backward]: with xhat = (x - mean) * invstd and M the
    // global count, the training-mode gradient is
    //   dx = w * invstd * (dy - sum(dy) / M - xhat * sum(dy * xhat) / M)
    // with both sums over every rank. The kernel's eval-form backward gives
    // w * invstd * dy and this rank's sum(dy * xhat) (its "dweight") and
    // sum(dy) (its "dbias"); we all-reduce those two and add the rest as
    // dx += x * k2 + k3 per channel. grad_weight and grad_bias are returned
    // local, as torch.nn.SyncBatchNorm does: DDP averages them like any other.
    const bool x_needs = autograd::needs_grad({x});
    const bool has_weight = weight.defined(), has_bias = bias.defined();
    // Without affine weights the kernel still has to return sum(dy * xhat).
    const Tensor w = has_weight ? weight : ones({C}, sopt);
    Tensor save_mean = r.save_mean, save_invstd = r.save_invstd;
    ProcessGroup* group = &pg;
    autograd::record(
        "SyncBatchNormBackward", {x, weight, bias}, {r.out},
        [x, w, save_mean, save_invstd, count, x_needs, has_weight, has_bias,
         group](const V& grads) -> V {
          auto [dx, dweight, dbias] =
              ops::batch_norm_backward(grads[0], x, w, save_mean, save_invstd, /*training=*/false);
          if (x_needs) {
            const int64_t C = x.size(1);
            std::vector<double> sums = dbias.to_vector<double>();  // [sum dy (C), sum dy*xhat (C)]
            const auto sdx = dweight.to_vector<double>();
            sums.insert(sums.end(), sdx.begin(), sdx.end());
            Tensor all = from_vector<double>(sums, {2 * C}, DType::f64);
            group->all_reduce(all);
            const auto gs = all.to_vector<double>();
            const auto wv = w.to_vector<double>();
            const auto mv = save_mean.to_vector<double>();
            const auto iv = save_invstd.to_vector<double>();
            std::vector<double> k2(C), k3(C);
            for (int64_t c = 0; c < C; ++c) {
              const double k1 = wv[c] * iv[c];
              k2[c] = -k1 * iv[c] * gs[C + c] / count;  // times x
              k3[c] = -k1 * gs[c] / count - mv[c] * k2[c];
            }
            // In place: dx is the kernel's fresh tensor.
            ops::add_(dx, ops::mul(x, per_channel(k2, x)));
            ops::add_(dx, per_channel(k3, x));
          } else {
            dx = Tensor();
          }
          return {dx, has_weight ? dweight : Tensor(), has_bias ? dbias : Tensor()};
        });
  }
  return r.out;
}

int convert_sync_batchnorm(nn::Module& root, ProcessGroup& pg) {
  int n = 0;
  ProcessGroup* group = &pg;
  root.apply([&n, group](nn::Module& m) {
    auto* bn = dynamic_cast<nn::BatchNorm2dImpl*>(&m);
    if (bn == nullptr) return;
    bn->training_forward = [group](nn::BatchNorm2dImpl& b, const Tensor& x, double momentum) {
      // As the local forward: running stats only when tracked.
      const bool track = b.options.track_running_stats();
      return sync_batch_norm(x, b.weight, b.bias, track ? b.running_mean : Tensor(),
                             track ? b.running_var : Tensor(), momentum, b.options.eps(), *group);
    };
    ++n;
  });
  return n;
}

}  // namespace qk::dist
