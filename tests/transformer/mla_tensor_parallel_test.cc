// Tensor-parallel multi-latent attention against the unsplit GPT on forked
// ranks: the same full weights from the same seed, every gradient (gathered)
// and the loss over three Adam steps, with and without sequence parallelism
// and the query low rank, the latent KV cache, and how the weights split.
//
// Tolerances (f32) as tensor_parallel_gpt_test.cc's: the shards' GEMMs sum in
// another order than the unsplit model's.
#include <gtest/gtest.h>

#include <cmath>

#include "parallel/tp_ranks.h"
#include "qk/autograd/functions.h"
#include "qk/optim/adam.h"
#include "qk/parallel/sharding.h"
#include "qk/tensor/generator.h"
#include "qk/transformer/gpt_model.h"
#include "qk/transformer/mla.h"
#include "transformer/mla_testing.h"

namespace qk::transformer {
namespace {

using qk_tp_test::Group;
using qk_tp_test::on_tp_ranks;
using qk_tp_test::require_close;
using qk_tp_test::require_equal;

TransformerConfig tiny_mla(bool q_lora) { return tiny_mla_config(/*seq_length=*/8, q_lora ? 16 : 0); }

nn::NamedTensors grads_of(nn::Module& m) {
  nn::NamedTensors g;
  for (const auto& p : m.named_parameters()) g.insert(p.key(), p.value().grad());
  return g;
}

void compare_with_unsplit(const TransformerConfig& base, bool sequence_parallel, const Group& tp) {
  TransformerConfig c2 = base;
  c2.tensor_model_parallel_size = tp->size();
  c2.sequence_parallel = sequence_parallel;
  manual_seed(1234);
  GPTModel ref(base);
  manual_seed(1234);
  GPTModel par(c2, tp);
  const auto* layer = dynamic_cast<const TransformerLayerImpl*>(par->decoder->layers->ptr(0).get());
  REQUIRE(layer != nullptr && dynamic_cast<ParallelMultiLatentAttentionImpl*>(layer->self_attention.get()) != nullptr,
          "the tensor-parallel model's attention is not MLA");

  const nn::NamedTensors full = parallel::full_state_dict(*par, *tp), want = ref->state_dict();
  REQUIRE(full.size() == want.size(), "state dict sizes ", full.size(), " vs ", want.size());
  for (const auto& item : want) {
    REQUIRE(full.contains(item.key()), "missing ", item.key());
    require_equal(full[item.key()], item.value(), "initial " + item.key());
  }

  Generator g(11);
  const Tensor tokens = randint(0, 128, {2, 8}, DType::i64, g), labels = randint(0, 128, {2, 8}, DType::i64, g);
  optim::Adam opt_ref(ref->parameters(), optim::AdamOptions(1e-3));
  optim::Adam opt_par(par->parameters(), optim::AdamOptions(1e-3));
  const parallel::ShardSpecs specs = parallel::tensor_parallel_shard_specs(*par);
  for (int step = 0; step < 3; ++step) {
    opt_ref.zero_grad();
    opt_par.zero_grad();
    Tensor loss_ref = ref(tokens, Tensor(), labels), loss_par = par(tokens, Tensor(), labels);
    require_close(loss_par, loss_ref, 2e-6, "loss at step " + std::to_string(step));
    loss_ref.backward();
    loss_par.backward();
    parallel::all_reduce_partial_gradients(*par, *tp);
    if (step == 0) {  // later steps' gradients drift apart by Adam's normalised updates of rounding noise
      const nn::NamedTensors grads = parallel::gather_shards(grads_of(*par), specs, *tp);
      for (const auto& item : grads_of(*ref))
        require_close(grads[item.key()], item.value(), 1e-5, "grad " + item.key());
    }
    opt_ref.step();
    opt_par.step();
  }
}

TEST(TensorParallelMLA, Tp2EqualsTp1) {
  auto r = on_tp_ranks(2, "tp-mla", [](int, const Group& tp) {
    compare_with_unsplit(tiny_mla(true), false, tp);
    compare_with_unsplit(tiny_mla(false), false, tp);
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(TensorParallelMLA, SequenceParallelTp2EqualsTp1) {
  auto r = on_tp_ranks(2, "sp-mla", [](int, const Group& tp) {
    compare_with_unsplit(tiny_mla(true), true, tp);
    compare_with_unsplit(tiny_mla(false), true, tp);
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(TensorParallelMLA, HeadsSplitAndLatentCacheGeneration) {
  auto r = on_tp_ranks(2, "tp-mla-generate", [](int rank, const Group& tp) {
    TransformerConfig c2 = tiny_mla(true);
    c2.tensor_model_parallel_size = 2;
    manual_seed(7);
    GPTModel ref(tiny_mla(true));
    manual_seed(7);
    GPTModel par(c2, tp);
    // This rank's two heads: rows of the up projections, columns of linear_proj;
    // the down projections whole.
    const nn::NamedTensors mine = par->state_dict(), whole = ref->state_dict();
    const std::string p = "decoder.layers.0.self_attention.";
    require_equal(mine[p + "linear_q_up_proj.weight"], whole[p + "linear_q_up_proj.weight"].narrow(0, rank * 24, 24),
                  "q up rows");
    require_equal(mine[p + "linear_kv_up_proj.weight"], whole[p + "linear_kv_up_proj.weight"].narrow(0, rank * 28, 28),
                  "kv up rows");
    require_equal(mine[p + "linear_proj.weight"], whole[p + "linear_proj.weight"].narrow(1, rank * 12, 12),
                  "linear_proj columns");
    require_equal(mine[p + "linear_kv_down_proj.weight"], whole[p + "linear_kv_down_proj.weight"], "kv down");

    ref->eval();
    par->eval();
    KVCache cr = ref->make_kv_cache(1, 8), cp = par->make_kv_cache(1, 8);
    REQUIRE(cp.is_latent() && cp.values_per_position() == 12 + 4, "each rank caches the whole latent");
    const Tensor prompt = from_vector<int64_t>({3, 90, 14, 27, 5}, {1, 5});
    require_close(par->forward_step(prompt, cp), ref->forward_step(prompt, cr), 2e-6, "prompt logits");
    const Tensor next = from_vector<int64_t>({17}, {1, 1});
    require_close(par->forward_step(next, cp), ref->forward_step(next, cr), 2e-6, "next-token logits");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace
}  // namespace qk::transformer
