// Differentiable flash attention: the raw kernels (qk/tensor/ops/attention.h)
// with a backward that recomputes the attention tiles from the saved output
// and row logsumexp. Dropout takes its counters from the generator in the
// forward and the backward replays the same (seed, offset).
#include "qk/autograd/autocast.h"
#include "qk/autograd/llm_ops.h"
#include "qk/tensor/backend.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/attention.h"

namespace qk {

using autograd::record;
using V = std::vector<Tensor>;

Tensor flash_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                       const AttentionOptions& o) {
  QK_CHECK(o.dropout_p >= 0 && o.dropout_p <= 1,
           "flash_attention: dropout_p must be in [0, 1], got ", o.dropout_p);
  const Tensor q = autocast::to_low(q_in), k = autocast::to_low(k_in), v = autocast::to_low(v_in);
  ops::FlashAttentionParams p;
  p.causal = o.causal;
  p.scale = o.scale;
  if (o.training && o.dropout_p > 0) {
    QK_CHECK((q.dim() == 4 || q.dim() == 5) && k.dim() == 4,
             "flash_attention: expected q [B, T, Hq, D] (or [B, T, Hkv, G, D]) and k [B, S, Hkv, ",
             "D], got ", shape_str(q.shape()), " and ", shape_str(k.shape()));
    Generator& gen = o.generator ? *o.generator : default_generator(q.device());
    p.dropout_p = o.dropout_p;
    p.seed = gen.seed();
    const uint64_t n = ops::flash_attention_counters(q.size(0), ops::attention_query_heads(q), q.size(1), k.size(1));
    if (capturing(q.device())) {
      // Recorded in a graph: counters relative to a base each replay moves on.
      const GraphCounter c = graph_rng_counter(gen, n, q.device());
      p.offset = c.relative;
      p.offset_base = c.base;
    } else {
      p.offset = gen.advance(n);
    }
  }
  auto [out, lse] = ops::flash_attention(q, k, v, p);
  if (autograd::needs_grad({q, k, v})) {
    const Tensor y = out.detach();  // saving `out` itself would make a cycle through its grad_fn
    record("FlashAttentionBackward", {q, k, v}, {out}, [q, k, v, y, lse, p](const V& g) -> V {
      auto [dq, dk, dv] = ops::flash_attention_backward(g[0], q, k, v, y, lse, p);
      return {dq, dk, dv};
    });
  }
  return out;
}

}  // namespace qk
