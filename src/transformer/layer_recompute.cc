// run_layers_with_recompute: the layers as checkpointed regions or plainly.
#include "qk/transformer/layer_recompute.h"

#include <algorithm>

#include "qk/autograd/autograd.h"
#include "qk/autograd/checkpoint.h"

namespace qk::transformer {

namespace {

using Layers = std::vector<std::shared_ptr<TransformerLayerImpl>>;

// Layers [begin, end) from `hidden`, as one checkpointed region or plainly.
Tensor run_region(const Layers& layers, const Tensor& hidden, const AttentionContext& ctx, size_t begin, size_t end,
                  bool checkpointed, const std::function<void(const nn::Module&)>& pre_hook) {
  if (pre_hook)
    for (size_t i = begin; i < end; ++i) pre_hook(*layers[i]);
  // By value: the region's re-run happens in backward, after this call returned.
  auto body = [region = Layers(layers.begin() + static_cast<std::ptrdiff_t>(begin),
                               layers.begin() + static_cast<std::ptrdiff_t>(end)),
               ctx, begin](const std::vector<Tensor>& in) {
    AttentionContext c = ctx;
    Tensor h = in[0];
    for (size_t i = 0; i < region.size(); ++i) {
      c.layer = static_cast<int64_t>(begin + i);
      h = region[i]->forward(h, c);
    }
    return std::vector<Tensor>{h};
  };
  if (!checkpointed) return body({hidden})[0];
  return autograd::checkpoint(body, {hidden},
                              {.generators = {ctx.attention_dropout_generator, ctx.hidden_dropout_generator}})[0];
}

}  // namespace

Tensor run_layers_with_recompute(const Layers& layers, const Tensor& hidden, const AttentionContext& ctx,
                                 const LayerRecompute& r, bool training,
                                 const std::function<void(const nn::Module&)>& pre_hook) {
  Tensor h = hidden;
  const size_t n = layers.size();
  const bool full = r.granularity == RecomputeGranularity::full && training && ctx.cache == nullptr &&
                    autograd::grad_mode_enabled();
  const auto k = static_cast<size_t>(std::max<int64_t>(r.num_layers, 1));
  if (full && r.method == RecomputeMethod::uniform) {
    for (size_t i = 0; i < n; i += k) h = run_region(layers, h, ctx, i, std::min(i + k, n), true, pre_hook);
  } else {
    const size_t checkpointed = full && r.method == RecomputeMethod::block ? k : 0;
    for (size_t i = 0; i < n; ++i) h = run_region(layers, h, ctx, i, i + 1, i < checkpointed, pre_hook);
  }
  return h;
}

}  // namespace qk::transformer
