// The tensor-parallel GPT (GPT-2 and Llama layouts, grouped-query attention
// with 2 query groups) against the unsplit model on forked ranks: the same
// full weights from the same seed, the loss, every gradient (gathered), ten
// Adam steps, sequence parallelism, generation with the KV cache, whole-by-
// name state dicts, and the sizes that do not split.
//
// Tolerances (f32): the shards' GEMMs and the vocabulary-parallel softmax sum
// in another order than the unsplit model. Losses agree to a relative 2e-6 at
// each of ten Adam steps (lr 1e-3) on one batch, gradients to 1e-5 of each
// tensor's largest entry (measured here: losses equal to the printed digit,
// gradients within 9e-7). Initial weights are bit-identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "parallel/tp_ranks.h"
#include "qk/autograd/functions.h"
#include "qk/optim/adam.h"
#include "qk/parallel/sharding.h"
#include "qk/tensor/generator.h"
#include "qk/transformer/gpt_model.h"
#include "qk/transformer/tensor_parallel.h"

namespace qk::transformer {
namespace {

using qk_tp_test::Group;
using qk_tp_test::on_tp_ranks;
using qk_tp_test::rel_diff;
using qk_tp_test::require_close;
using qk_tp_test::require_equal;

TransformerConfig tiny_gpt2() {
  TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.seq_length = 8;
  c.vocab_size = 128;
  c.make_vocab_size_divisible_by = 32;  // 128 rows at TP 1, 2 and 4: the same full table
  c.activation_func = Activation::openai_gelu;
  c.hidden_dropout = 0.0;
  c.attention_dropout = 0.0;
  return c;
}

TransformerConfig tiny_llama() {
  TransformerConfig c = tiny_gpt2();
  c.position_embedding_type = PositionEmbeddingType::rope;
  c.normalization = Normalization::RMSNorm;
  c.set_swiglu();
  c.ffn_hidden_size = 48;
  c.num_query_groups = 2;
  c.qk_layernorm = true;
  c.add_bias_linear = false;
  c.share_embeddings_and_output_weights = false;
  return c;
}

struct Batch {
  Tensor tokens, labels, loss_mask;
};

Batch batch_for(int64_t step, int64_t b = 2, int64_t t = 8) {
  Generator g(100 + static_cast<uint64_t>(step));
  Batch x;
  x.tokens = randint(0, 128, {b, t}, DType::i64, g);
  x.labels = randint(0, 128, {b, t}, DType::i64, g);
  x.loss_mask = ones({b, t});
  x.loss_mask.data_ptr<float>()[3] = 0.0f;  // masked tokens take no part
  x.loss_mask.data_ptr<float>()[t + 5] = 0.0f;
  return x;
}

nn::NamedTensors grads_of(nn::Module& m) {
  nn::NamedTensors g;
  for (const auto& p : m.named_parameters()) g.insert(p.key(), p.value().grad());
  return g;
}

// One rank's whole comparison; tp_size ranks hold the split model.
void compare_with_unsplit(const TransformerConfig& base, bool sequence_parallel, int steps, const Group& tp) {
  TransformerConfig c1 = base, c2 = base;
  c2.tensor_model_parallel_size = tp->size();
  c2.sequence_parallel = sequence_parallel;
  manual_seed(1234);
  GPTModel ref(c1);
  manual_seed(1234);
  GPTModel par(c2, tp);
  REQUIRE(par->config().sequence_parallel == sequence_parallel, "sequence_parallel kept");

  // Initialisation: the shards put together are the unsplit weights, name by name.
  const nn::NamedTensors full = parallel::full_state_dict(*par, *tp);
  const nn::NamedTensors want = ref->state_dict();
  REQUIRE(full.size() == want.size(), "state dict sizes ", full.size(), " vs ", want.size());
  for (const auto& item : want) {
    REQUIRE(full.contains(item.key()), "missing ", item.key());
    require_equal(full[item.key()], item.value(), "initial " + item.key());
  }

  optim::Adam opt_ref(ref->parameters(), optim::AdamOptions(1e-3));
  optim::Adam opt_par(par->parameters(), optim::AdamOptions(1e-3));
  const parallel::ShardSpecs specs = parallel::tensor_parallel_shard_specs(*par);
  double first_loss = 0;
  for (int step = 0; step < steps; ++step) {
    const Batch x = batch_for(0);  // one batch: the loss goes down
    opt_ref.zero_grad();
    opt_par.zero_grad();
    Tensor loss_ref = ref(x.tokens, Tensor(), x.labels, x.loss_mask);
    Tensor loss_par = par(x.tokens, Tensor(), x.labels, x.loss_mask);
    require_close(loss_par, loss_ref, 2e-6, "loss at step " + std::to_string(step));
    if (step == steps - 1 && steps > 2)
      REQUIRE(loss_ref.item<double>() < first_loss - 0.05, "the loss did not go down: ", first_loss, " -> ",
              loss_ref.item<double>());
    if (step == 0) first_loss = loss_ref.item<double>();
    loss_ref.backward();
    loss_par.backward();
    parallel::all_reduce_partial_gradients(*par, *tp);
    if (step == 0) {
      const nn::NamedTensors g = parallel::gather_shards(grads_of(*par), specs, *tp);
      for (const auto& item : grads_of(*ref)) require_close(g[item.key()], item.value(), 1e-5, "grad " + item.key());
      double norm_ref = 0;
      for (const auto& item : grads_of(*ref)) norm_ref += sum(square(item.value())).item<double>();
      const double norm_par = parallel::tensor_parallel_grad_norm(*par, *tp);
      REQUIRE(std::abs(norm_par - std::sqrt(norm_ref)) <= 1e-5 * std::sqrt(norm_ref), "grad norm ", norm_par,
              " vs ", std::sqrt(norm_ref));
    }
    opt_ref.step();
    opt_par.step();
  }
}

TEST(TensorParallelGPT, Gpt2AtTp2EqualsTp1OverTenSteps) {
  auto r = on_tp_ranks(2, "tp-gpt2", [](int, const Group& tp) { compare_with_unsplit(tiny_gpt2(), false, 10, tp); });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(TensorParallelGPT, LlamaWithTwoQueryGroupsAtTp2EqualsTp1OverTenSteps) {
  auto r = on_tp_ranks(2, "tp-llama", [](int, const Group& tp) { compare_with_unsplit(tiny_llama(), false, 10, tp); });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(TensorParallelGPT, SequenceParallelAtTp2EqualsTp1OverTenSteps) {
  auto r = on_tp_ranks(2, "sp-gpt2", [](int, const Group& tp) {
    compare_with_unsplit(tiny_gpt2(), true, 10, tp);   // learned positions: all-reduce, add, scatter
    compare_with_unsplit(tiny_llama(), true, 10, tp);  // RoPE: the lookup reduce-scatters
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(TensorParallelGPT, Gpt2AtTp4EqualsTp1) {
  auto r = on_tp_ranks(4, "tp4-gpt2", [](int, const Group& tp) { compare_with_unsplit(tiny_gpt2(), false, 2, tp); });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(TensorParallelGPT, GenerationWithTheKvCacheEqualsTp1) {
  auto r = on_tp_ranks(2, "tp-generate", [](int, const Group& tp) {
    TransformerConfig c2 = tiny_llama();
    c2.tensor_model_parallel_size = 2;
    manual_seed(7);
    GPTModel ref(tiny_llama());
    manual_seed(7);
    GPTModel par(c2, tp);
    ref->eval();
    par->eval();
    KVCache cr = ref->make_kv_cache(1, 8), cp = par->make_kv_cache(1, 8);
    REQUIRE(cp.num_layers() == 2, "cache layers");
    const Tensor prompt = batch_for(0, 1, 5).tokens;
    require_close(par->forward_step(prompt, cp), ref->forward_step(prompt, cr), 2e-6, "prompt logits");
    const Tensor next = from_vector<int64_t>({17}, {1, 1});
    require_close(par->forward_step(next, cp), ref->forward_step(next, cr), 2e-6, "next-token logits");
    // Logits without labels are gathered over the vocabulary.
    const Tensor logits = par(prompt);
    REQUIRE(logits.shape() == (Shape{1, 5, 128}), "logits ", shape_str(logits.shape()));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(TensorParallelGPT, FullStateDictsLoadIntoAnotherSplit) {
  auto r = on_tp_ranks(2, "tp-load", [](int rank, const Group& tp) {
    TransformerConfig c2 = tiny_llama();
    c2.tensor_model_parallel_size = 2;
    manual_seed(1);
    GPTModel ref(tiny_llama());
    manual_seed(99);  // other weights ...
    GPTModel par(c2, tp);
    parallel::load_full_state_dict(*par, ref->state_dict(), *tp);  // ... replaced by the unsplit model's
    const Batch x = batch_for(3);
    require_close(par(x.tokens, Tensor(), x.labels, x.loss_mask), ref(x.tokens, Tensor(), x.labels, x.loss_mask), 2e-6,
                  "loss after loading");
    // The shards are Megatron's: this rank's query groups of linear_qkv, matching gate/up rows of linear_fc1.
    const nn::NamedTensors mine = par->state_dict(), whole = ref->state_dict();
    const std::string qkv = "decoder.layers.0.self_attention.linear_qkv.weight";
    const int64_t rows = whole[qkv].size(0) / 2;  // one query group: (2 heads + k + v) x 8 dims
    require_equal(mine[qkv], whole[qkv].narrow(0, rank * rows, rows), "qkv rows of this rank's query group");
    const std::string fc1 = "decoder.layers.1.mlp.linear_fc1.weight";
    const Tensor want_fc1 = cat({whole[fc1].narrow(0, rank * 24, 24), whole[fc1].narrow(0, 48 + rank * 24, 24)}, 0);
    require_equal(mine[fc1], want_fc1, "fc1 [gate_r; up_r]");
    // A full table that does not split over the ranks names its key.
    nn::NamedTensors bad = whole;
    bad.insert_or_assign("embedding.word_embeddings.weight", zeros({129, 32}));
    bool threw = false;
    try {
      parallel::load_full_state_dict(*par, bad, *tp);
    } catch (const ValueError& e) {
      threw = std::string(e.what()).find("'embedding.word_embeddings.weight'") != std::string::npos;
    }
    REQUIRE(threw, "a 129-row table was split over 2 ranks");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// With dropout, replicated activations must get the same mask on every rank
// of the group and sharded ones their own: after a few steps the replicated
// parameters are still bit-identical across the ranks (they would drift
// apart with different masks on replicated activations), and the loss is the
// same on every rank.
void dropout_keeps_replicas_equal(bool sequence_parallel, const Group& tp) {
  TransformerConfig c = tiny_llama();
  c.hidden_dropout = 0.2;
  c.attention_dropout = 0.2;
  c.tensor_model_parallel_size = tp->size();
  c.sequence_parallel = sequence_parallel;
  manual_seed(5);
  GPTModel m(c, tp);
  optim::Adam opt(m->parameters(), optim::AdamOptions(1e-2));
  const parallel::ShardSpecs specs = parallel::tensor_parallel_shard_specs(*m);
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    const Batch x = batch_for(step);
    Tensor loss = m(x.tokens, Tensor(), x.labels, x.loss_mask);
    Tensor both = empty({tp->size()});
    tp->all_gather(both, loss.detach().reshape({1}));
    REQUIRE(both.data_ptr<float>()[0] == both.data_ptr<float>()[1], "the ranks' losses differ");
    loss.backward();
    parallel::all_reduce_partial_gradients(*m, *tp);
    opt.step();
  }
  REQUIRE(m->tensor_parallel_generator() != nullptr &&
              m->tensor_parallel_generator()->seed() == 5 + 2718 + static_cast<uint64_t>(tp->rank()),
          "Megatron's model-parallel seed");
  int replicated = 0;
  for (const auto& p : m->named_parameters()) {
    if (specs.count(p.key())) continue;
    ++replicated;
    Tensor all = empty({tp->size(), p.value().numel()});
    tp->all_gather(all, p.value().detach().contiguous().reshape({p.value().numel()}));
    require_equal(all.select(0, 1), all.select(0, 0), "replicated " + p.key() + " across the ranks");
  }
  REQUIRE(replicated > 0, "no replicated parameter checked");
}

TEST(TensorParallelGPT, DropoutKeepsReplicatedParametersEqualAcrossRanks) {
  auto r = on_tp_ranks(2, "tp-dropout", [](int, const Group& tp) {
    dropout_keeps_replicas_equal(false, tp);
    dropout_keeps_replicas_equal(true, tp);
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// The tensor-parallel group's traffic for one forward and backward, against
// Megatron's volume: per layer two all-reduces of the activations [B, T, C]
// forward (attention and MLP outputs) and two backward (their inputs'
// gradients), plus the embedding's forward and the output layer's backward,
// plus the vocabulary-parallel loss's row max (N f32) and sums (2N f64).
// Under sequence parallelism each all-reduce becomes an all-gather and a
// reduce-scatter of the same activations, moving the same bytes. With
// QCCL_ALGO=ring on 2 ranks an all-reduce sends its whole buffer, an
// all-gather or reduce-scatter half of the full activations.
TEST(TensorParallelGPT, TheGroupMovesMegatronsVolumePerStep) {
  ::setenv("QCCL_ALGO", "ring", 1);
  auto r = on_tp_ranks(2, "tp-volume", [](int, const Group& tp) {
    for (bool sp : {false, true}) {
      TransformerConfig c = sp ? tiny_llama() : tiny_gpt2();
      c.tensor_model_parallel_size = 2;
      c.sequence_parallel = sp;
      manual_seed(3);
      GPTModel m(c, tp);
      const Batch x = batch_for(0);  // B 2, T 8
      const uint64_t layers = 2, act = 2 * 8 * 32 * 4, n = 16, loss_bytes = n * 4 + 2 * n * 8;
      const dist::GroupTraffic before = tp->traffic();
      m(x.tokens, Tensor(), x.labels, x.loss_mask).backward();
      const dist::GroupTraffic d = tp->traffic() - before;
      const uint64_t per_step = (4 * layers + 2) * act;
      if (!sp) {
        REQUIRE(d.all_reduce.calls == 4 * layers + 4 && d.all_reduce.bytes == per_step + loss_bytes,
                "all-reduces: ", d.all_reduce.calls, " calls, ", d.all_reduce.bytes, " bytes, expected ",
                per_step + loss_bytes);
        REQUIRE(d.all_gather.calls == 0 && d.reduce_scatter.calls == 0, "no all-gather or reduce-scatter");
      } else {
        REQUIRE(d.all_gather.calls == 4 * layers + 2 && d.all_gather.bytes == per_step, "all-gathers: ",
                d.all_gather.calls, " calls, ", d.all_gather.bytes, " bytes");
        REQUIRE(d.reduce_scatter.calls == 4 * layers + 2 && d.reduce_scatter.bytes == per_step, "reduce-scatters: ",
                d.reduce_scatter.calls, " calls, ", d.reduce_scatter.bytes, " bytes");
        REQUIRE(d.all_reduce.calls == 2 && d.all_reduce.bytes == loss_bytes, "only the loss all-reduces");
      }
      REQUIRE(d.wire_bytes_sent == per_step + loss_bytes && d.wire_bytes_received == d.wire_bytes_sent,
              sp ? "SP" : "TP", ": moved ", d.wire_bytes_sent, " bytes on the wire, expected ", per_step + loss_bytes);
    }
  });
  ::unsetenv("QCCL_ALGO");
  EXPECT_TRUE(r.ok()) << r.summary();
}

std::string config_error(TransformerConfig c) {
  try {
    c.validate();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

TEST(TensorParallelGPT, SizesThatDoNotSplitAreErrorsNamingTheFlags) {
  TransformerConfig c = tiny_gpt2();
  c.num_attention_heads = 6;
  c.hidden_size = 48;
  c.tensor_model_parallel_size = 4;
  std::string m = config_error(c);
  EXPECT_NE(m.find("--num-attention-heads 6"), std::string::npos) << m;
  EXPECT_NE(m.find("--tensor-model-parallel-size 4"), std::string::npos) << m;

  c = tiny_llama();  // 2 query groups over 4 ranks
  c.tensor_model_parallel_size = 4;
  m = config_error(c);
  EXPECT_NE(m.find("--num-query-groups 2"), std::string::npos) << m;

  c = tiny_gpt2();
  c.ffn_hidden_size = 30;
  c.tensor_model_parallel_size = 4;
  m = config_error(c);
  EXPECT_NE(m.find("--ffn-hidden-size 30"), std::string::npos) << m;

  // Megatron: --sequence-parallel is dropped at tensor-parallel size 1.
  c = tiny_gpt2();
  c.sequence_parallel = true;
  c.validate();
  EXPECT_FALSE(c.sequence_parallel);
}

TEST(TensorParallelGPT, AConfigForAnotherSizeOrASequenceThatDoesNotSplitIsRefused) {
  auto r = on_tp_ranks(2, "tp-bad", [](int, const Group& tp) {
    bool threw = false;
    try {
      GPTModel m(tiny_gpt2(), tp);  // tensor_model_parallel_size 1 on a group of 2
    } catch (const ValueError& e) {
      threw = std::string(e.what()).find("--tensor-model-parallel-size 1") != std::string::npos;
    }
    REQUIRE(threw, "a TP-1 config was built on a group of 2");
    TransformerConfig c = tiny_gpt2();
    c.tensor_model_parallel_size = 2;
    c.sequence_parallel = true;
    GPTModel m(c, tp);
    threw = false;
    try {
      m(batch_for(0, 1, 7).tokens);
    } catch (const ValueError& e) {
      threw = std::string(e.what()).find("--sequence-parallel") != std::string::npos;
    }
    REQUIRE(threw, "7 tokens were split over 2 ranks");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace
}  // namespace qk::transformer
