// Memory: the parameter counts against the models' own parameters, the
// simulator's weights and optimizer state against `qk pretrain-gpt`'s
// theoretical memory line for the same flags, and fits / does not fit.
#include <gtest/gtest.h>

#include <regex>

#include "qk/parallel/pipeline_layout.h"
#include "qk/recipes/gpt_pretrain.h"
#include "qk/sim/simulate.h"
#include "qk/transformer/gpt_model.h"
#include "qk/transformer/gpt_pipeline.h"
#include "qk/transformer/param_count.h"
#include "test_cluster.h"

namespace qk::sim {
namespace {

recipes::MegatronArgs args(std::vector<std::string> flags, int64_t world = 1) {
  for (const char* f : {"--seq-length", "64", "--max-position-embeddings", "64", "--micro-batch-size", "2",
                        "--vocab-size", "300"})
    flags.emplace_back(f);
  return recipes::parse_megatron_args(flags, megatron_options(world)).args;
}

int64_t numel(const std::vector<Tensor>& ps) {
  int64_t n = 0;
  for (const Tensor& p : ps) n += p.numel();
  return n;
}

const std::vector<std::vector<std::string>>& models() {
  static const std::vector<std::vector<std::string>> m = {
      // GPT-2: LayerNorm, biases, learned positions, tied output.
      {"--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "4"},
      // Llama: RMSNorm, SwiGLU, grouped-query, RoPE, no biases, untied, q/k norms.
      {"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "8", "--group-query-attention",
       "--num-query-groups", "2", "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
       "--disable-bias-linear", "--untie-embeddings-and-output-weights", "--qk-layernorm", "--ffn-hidden-size", "96"},
      // MoE in every other layer, with a shared expert.
      {"--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--num-experts", "4",
       "--moe-router-topk", "2", "--moe-ffn-hidden-size", "48", "--moe-layer-freq", "2",
       "--moe-shared-expert-intermediate-size", "40"},
      // Multi-latent attention with a low-rank query.
      {"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--multi-latent-attention",
       "--q-lora-rank", "24", "--kv-lora-rank", "16", "--qk-head-dim", "16", "--qk-pos-emb-head-dim", "8",
       "--v-head-dim", "16", "--position-embedding-type", "rope", "--normalization", "RMSNorm", "--qk-layernorm"},
  };
  return m;
}

TEST(ParamCount, EqualsTheModelsParameters) {
  for (const auto& flags : models()) {
    const recipes::MegatronArgs a = args(flags);
    const transformer::TransformerConfig c = recipes::gpt_transformer_config(a, *a.vocab_size);
    transformer::GPTModel model(c);
    EXPECT_EQ(transformer::num_parameters(c).total(), numel(model->parameters())) << c.summary();
  }
}

TEST(ParamCount, EqualsEachPipelineStagesParameters) {
  for (const auto& base : models()) {
    for (bool untied : {false, true}) {
      auto flags = base;
      flags.insert(flags.end(), {"--pipeline-model-parallel-size", "2"});
      if (untied && std::find(flags.begin(), flags.end(), "--untie-embeddings-and-output-weights") == flags.end())
        flags.push_back("--untie-embeddings-and-output-weights");
      const recipes::MegatronArgs a = args(flags, 2);
      const transformer::TransformerConfig c = recipes::gpt_transformer_config(a, *a.vocab_size);
      parallel::PipelineSplitOptions so;
      so.num_layers = c.num_layers;
      so.pipeline_model_parallel_size = 2;
      const auto split = parallel::PipelineLayerSplit::make(so);
      for (int r = 0; r < 2; ++r) {
        auto chunks = transformer::build_gpt_model_chunks(c, split, r);
        int64_t real = 0;
        for (auto& ch : chunks) real += numel(ch->parameters());
        transformer::ParamScope s;
        s.first_layer = split.layer_offset(r, 0) + 1;
        s.num_layers = split.num_layers(r, 0);
        s.embedding = r == 0;
        s.output = r == 1;
        s.pipeline_size = 2;
        EXPECT_EQ(transformer::num_parameters(c, s).total(), real) << "stage " << r << " " << c.summary();
      }
    }
  }
}

// "Theoretical memory footprints: weight and optimizer=123.45 MB".
double line_mb(const std::string& line) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(line, m, std::regex("weight and optimizer=([0-9.]+) MB"))) << line;
  return std::stod(m[1]);
}

TEST(Memory, WeightsAndOptimizerEqualTheTrainersTheoreticalMemory) {
  const Cluster cluster = test::round_cluster();
  for (const auto& base : models()) {
    for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
             {}, {"--bf16"}, {"--bf16", "--use-distributed-optimizer"}, {"--use-distributed-optimizer"}}) {
      auto flags = base;
      flags.insert(flags.end(), extra.begin(), extra.end());
      // The trainer's line on one rank's model, as four data-parallel ranks would print it.
      const recipes::MegatronArgs one = args(flags, 1);
      const transformer::TransformerConfig c = recipes::gpt_transformer_config(one, *one.vocab_size);
      transformer::GPTModel model(c);
      auto opt = recipes::gpt_build_optimizer(one, *model, nullptr);
      const recipes::MegatronArgs four = args(flags, 4);
      const double trainer = line_mb(recipes::gpt_theoretical_memory(four, *opt, 4));
      // MoE: the trainer's line counts every parameter over the data-parallel
      // ranks; the simulator shards experts over the expert-data-parallel
      // ranks, which is the same here (expert-parallel size 1).
      const SimResult r = simulate(four, cluster);
      const MemoryUse& m = r.memory;
      const double sim = (m.weights + m.grads + m.main_params + m.optimizer_state) / (1024.0 * 1024.0);
      EXPECT_NEAR(sim, trainer, 0.006) << c.summary();  // the line prints two decimals
    }
  }
}

std::vector<std::string> billion(std::vector<std::string> more = {}) {
  std::vector<std::string> f = {"--num-layers", "24",          "--hidden-size", "2048", "--num-attention-heads", "16",
                                "--seq-length", "1024",        "--max-position-embeddings", "1024",
                                "--vocab-size", "50257",       "--bf16", "--micro-batch-size", "1",
                                "--global-batch-size", "16"};
  f.insert(f.end(), more.begin(), more.end());
  return f;
}

TEST(Memory, FitsOrSaysWhyNot) {
  const Cluster small = test::round_cluster(/*memory_gb=*/16);
  // 1.3B parameters x 18 bytes (bf16 weights, fp32 gradients, main weights and Adam) on each of 4 ranks.
  const SimResult dp = simulate(recipes::parse_megatron_args(billion(), megatron_options(4)).args, small);
  EXPECT_FALSE(dp.fits);
  EXPECT_GT(dp.mem_gb_per_gpu, 16);
  EXPECT_NE(dp.fit_note.find("does not fit"), std::string::npos) << dp.fit_note;
  EXPECT_NE(dp.fit_note.find("16.0 GB"), std::string::npos) << dp.fit_note;
  // Split four ways by tensor parallelism: a quarter of the weights and state.
  const SimResult tp = simulate(
      recipes::parse_megatron_args(billion({"--tensor-model-parallel-size", "4", "--sequence-parallel"}),
                                   megatron_options(4))
          .args,
      small);
  EXPECT_TRUE(tp.fits) << tp.mem_gb_per_gpu;
  EXPECT_TRUE(tp.fit_note.empty());
  EXPECT_NEAR(tp.memory.weights, dp.memory.weights / 4, dp.memory.weights * 0.01);
}

TEST(Memory, DistributedOptimizerShardsMainWeightsAndState) {
  const Cluster c = test::round_cluster();
  const SimResult plain = simulate(recipes::parse_megatron_args(billion(), megatron_options(4)).args, c);
  const SimResult sharded =
      simulate(recipes::parse_megatron_args(billion({"--use-distributed-optimizer"}), megatron_options(4)).args, c);
  EXPECT_DOUBLE_EQ(sharded.memory.weights, plain.memory.weights);
  EXPECT_DOUBLE_EQ(sharded.memory.grads, plain.memory.grads);
  EXPECT_NEAR(sharded.memory.optimizer_state, plain.memory.optimizer_state / 4, 16);
  EXPECT_NEAR(sharded.memory.main_params, plain.memory.main_params / 4, 16);
}

TEST(Memory, RecomputeKeepsFewerActivations) {
  const Cluster c = test::round_cluster();
  auto run = [&](std::vector<std::string> more) {
    return simulate(recipes::parse_megatron_args(billion(more), megatron_options(1)).args, c);
  };
  const SimResult none = run({});
  const SimResult selective = run({"--recompute-granularity", "selective"});
  const SimResult full = run({"--recompute-granularity", "full", "--recompute-method", "uniform",
                              "--recompute-num-layers", "1"});
  EXPECT_LT(selective.memory.activations, none.memory.activations);
  EXPECT_LT(full.memory.activations, selective.memory.activations);
  // ... and pay for it in time.
  EXPECT_GT(full.step_time_s, none.step_time_s);
}

}  // namespace
}  // namespace qk::sim
