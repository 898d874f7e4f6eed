#include "megatron_init.h"

#include "qk/nn/init.h"
#include "qk/transformer/layers.h"

namespace qk::transformer {

parallel::InitMethod megatron_init(const TransformerConfig& c, bool scaled) {
  return [c, scaled](const Tensor& w, const Tensor& b) {
    if (scaled)
      init_scaled_normal(w, c);
    else
      init_normal(w, c);
    if (b.defined()) nn::init::zeros_(b);
  };
}

}  // namespace qk::transformer
