// The seed's launch scripts (seed 002, section 3; extracted into
// tests/fixtures/megatron_args/seed_002_flags.txt) with the practice sizes:
// every flag is accepted or refused as its status says, and every parallel
// layout, MoE and MLA flag of the seed runs.
#include <gtest/gtest.h>

#include <set>

#include "data/test_util.h"
#include "megatron_args_test_util.h"
#include "qk/data/indexed_dataset.h"

namespace qk::test {
namespace {

using recipes::FlagStatus;

// Each seed flag's status, as the table in src/recipes/megatron_args_status.cc
// says: with tensor, sequence, pipeline and expert parallelism, mixture of
// experts and multi-latent attention built, no seed flag needs a missing
// feature any more.
const std::set<std::string>& expected_not_yet() {
  static const std::set<std::string> s = {};
  return s;
}
// Supported flags whose seed value Megatron itself rejects at the practice
// layout (pipeline size 1): --num-layers-per-virtual-pipeline-stage 2 asks
// for the interleaved schedule, which needs a pipeline.
const std::set<std::string>& expected_invalid_at_pipeline_size_one() {
  static const std::set<std::string> s = {"--num-layers-per-virtual-pipeline-stage"};
  return s;
}
const std::set<std::string>& expected_noop() {
  static const std::set<std::string> s = {"--use-mcore-models", "--no-rope-fusion", "--distributed-backend",
                                          "--wait-after-ckpt"};
  return s;
}

recipes::FlagInfo info(const std::string& flag) {
  for (auto& i : recipes::megatron_flags())
    if (i.flag == flag) return i;
  ADD_FAILURE() << "no flag " << flag;
  return {};
}

TEST(MegatronSeedArgs, FixtureHasTheSeedArrays) {
  const SeedFlags s = load_seed_flags();
  const std::vector<std::string> want = {"MODEL_ARGS", "MOE_ARGS", "TRAINING_ARGS", "REGULARIZATION_ARGS",
                                         "LEARNING_RATE_ARGS", "MODEL_PARALLEL_ARGS", "MIXED_PRECISION_ARGS",
                                         "DATA_PATH"};
  EXPECT_EQ(s.order, want);
  EXPECT_EQ(s.arrays.at("MODEL_ARGS").size(), 16u);
  EXPECT_EQ(s.arrays.at("MOE_ARGS").size(), 20u);
  EXPECT_EQ(s.arrays.at("TRAINING_ARGS").size(), 20u);
  EXPECT_EQ(s.arrays.at("DATA_PATH").size(), 3u);
}

// The flags Megatron validates together (full recompute needs a method and a
// layer count; the MoE flags need experts and one another's sizes, grouped
// GEMM bf16): each is tried with its partners from the same array (the MoE
// flags with MOE_ARGS and --bf16).
Argv partners(const Argv& flag, const std::vector<std::string>& array, const std::vector<std::string>& moe_args) {
  static const std::set<std::string> recompute = {"--recompute-granularity", "--recompute-method",
                                                  "--recompute-num-layers"};
  Argv out;
  if (flag[0].rfind("--moe-", 0) == 0 || flag[0] == "--num-experts" || flag[0] == "--expert-model-parallel-size") {
    out = Argv{"--bf16"};  // --moe-grouped-gemm's (the seed's MIXED_PRECISION_ARGS)
    for (const auto& line : moe_args) {
      const Argv f = expand_line(line);
      if (f[0] != flag[0]) out = out + f;
    }
    return out;
  }
  if (!recompute.count(flag[0])) return out;
  for (const auto& line : array) {
    const Argv f = expand_line(line);
    if (recompute.count(f[0]) && f[0] != flag[0]) out = out + f;
  }
  return out;
}

// Every flag line of every array, alone (or with its partners) on top of a
// valid practice command line, does what its status says.
TEST(MegatronSeedArgs, EveryFlagAcceptedOrRefusedAsItsStatusSays) {
  const SeedFlags s = load_seed_flags();
  int checked = 0;
  for (const auto& name : s.order) {
    if (name == "DATA_PATH") continue;
    for (const auto& line : s.arrays.at(name)) {
      const Argv flag = expand_line(line);
      const Argv with = partners(flag, s.arrays.at(name), s.arrays.at("MOE_ARGS")) + flag;
      const recipes::FlagInfo i = info(flag[0]);
      SCOPED_TRACE(name + ": " + line);
      const FlagStatus want = expected_not_yet().count(flag[0]) ? FlagStatus::kNotYet
                              : expected_noop().count(flag[0])  ? FlagStatus::kNoop
                                                                : FlagStatus::kSupported;
      EXPECT_EQ(i.status, want) << flag[0] << " is " << recipes::flag_status_name(i.status);

      const std::string err = parse_error(practice() + with, 2);
      const bool refused = !err.empty();
      // --sequence-parallel at the practice tensor size 1: Megatron turns it
      // off, and one note says so.
      const bool noted_switch = flag[0] == "--sequence-parallel";
      if (i.status == FlagStatus::kNotYet && i.status_depends_on_value) {
        // The seed's value-dependent refusals are sizes: 1 is this build's layout, more needs the feature.
        const std::string v = flag.size() > 1 ? flag[1] : "";
        EXPECT_EQ(refused, v != "1") << err;
        if (v == "1") {
          EXPECT_EQ(parse_error(practice() + Argv{flag[0], "2"}, 2).find(flag[0] + " 2: "), 0u);
        }
      } else if (expected_invalid_at_pipeline_size_one().count(flag[0])) {
        EXPECT_NE(err.find("needs --pipeline-model-parallel-size > 1 (got 1)"), std::string::npos) << err;
        ++checked;
        continue;
      } else {
        // A supported flag with refused values (e.g. --position-embedding-type) gets one the build has.
        EXPECT_EQ(refused, i.status == FlagStatus::kNotYet) << err;
      }
      if (refused) {
        EXPECT_EQ(err.find(flag[0]), 0u) << err;
        EXPECT_NE(err.find("is not built yet"), std::string::npos) << err;
      } else {
        const auto p = recipes::parse_megatron_args(practice() + with, options(2));
        EXPECT_EQ(p.notes.size(), i.status == FlagStatus::kNoop || noted_switch ? 1u : 0u);
        if (!p.notes.empty()) {
          EXPECT_EQ(p.notes[0].find(flag[0]), 0u) << p.notes[0];
        }
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 16 + 20 + 20 + 4 + 2 + 2 + 2);
}

// Writes the seed's three data files (small) under `dir`, same names.
std::string write_seed_data(const TempDir& dir) {
  const std::vector<int> sizes = {23, 7, 20};  // documents per file
  const std::vector<std::string> names = {"data_10.txt_document", "data_11.txt_document", "data_9.txt_document"};
  for (size_t f = 0; f < names.size(); ++f) {
    data::IndexedDatasetBuilder b(data::bin_path(dir / names[f]), data::DType::kUint16);
    for (int d = 0; d < sizes[f]; ++d) {
      std::vector<int32_t> doc(10 + static_cast<size_t>(d), d + 1);
      b.add_document(doc, std::vector<int32_t>{static_cast<int32_t>(doc.size())});
    }
    b.finalize(data::idx_path(dir / names[f]));
  }
  return dir.path();
}

// The seed's DATA_PATH string as bash holds it, with the dataset folder replaced.
std::string seed_data_path(const SeedFlags& s, const std::string& folder) {
  std::string out = "\n";
  for (auto line : s.arrays.at("DATA_PATH")) {
    const std::string from = "/data/lecture/megatron-lm-musa-patch/examples/lecture/dataset";
    line.replace(line.find(from), from.size(), folder);
    out += line + "\n";
  }
  return out;
}

// MODEL_ARGS + TRAINING_ARGS (what this build runs) + the prose groups + DATA_PATH.
TEST(MegatronSeedArgs, PracticeLaunchParsesToTheExpectedFields) {
  const SeedFlags s = load_seed_flags();
  TempDir dir("megatron_seed_data");
  const std::string folder = write_seed_data(dir);
  Argv training;
  for (const auto& line : s.arrays.at("TRAINING_ARGS")) {
    const Argv f = expand_line(line);
    if (!expected_not_yet().count(f[0]) && !expected_invalid_at_pipeline_size_one().count(f[0]))
      training = training + f;
  }
  const Argv argv = expand_array(s.arrays.at("MODEL_ARGS")) + Argv{"--num-attention-heads", "8"} + training +
                    expand_array(s.arrays.at("REGULARIZATION_ARGS")) +
                    expand_array(s.arrays.at("LEARNING_RATE_ARGS")) + Argv{"--lr", "3e-4", "--min-lr", "3e-5"} +
                    expand_array(s.arrays.at("MODEL_PARALLEL_ARGS")) +
                    expand_array(s.arrays.at("MIXED_PRECISION_ARGS")) +
                    Argv{"--data-path", seed_data_path(s, folder), "--split", "949,50,1"};
  recipes::MegatronArgsOptions o;
  o.world_size = 2;
  const auto p = recipes::parse_megatron_args(argv, o);
  const auto& a = p.args;
  // MODEL_ARGS (heads overridden to the practice 8: argparse keeps the last value).
  EXPECT_EQ(a.num_layers, 6);
  EXPECT_EQ(a.hidden_size, 512);
  EXPECT_EQ(a.num_attention_heads, 8);
  EXPECT_EQ(a.kv_channels, 64);
  EXPECT_EQ(a.seq_length, 1024);
  EXPECT_EQ(a.max_position_embeddings, 1024);
  EXPECT_DOUBLE_EQ(a.norm_epsilon, 1e-6);
  EXPECT_DOUBLE_EQ(a.attention_dropout, 0.0);
  EXPECT_DOUBLE_EQ(a.hidden_dropout, 0.0);
  EXPECT_FALSE(a.add_bias_linear);
  EXPECT_FALSE(a.add_qkv_bias);
  EXPECT_EQ(a.vocab_size, 50257);
  EXPECT_EQ(a.ffn_hidden_size, 1408);
  EXPECT_EQ(a.position_embedding_type, "rope");
  EXPECT_FALSE(a.add_position_embedding);
  EXPECT_TRUE(a.swiglu);
  EXPECT_EQ(a.normalization, "RMSNorm");
  EXPECT_TRUE(a.untie_embeddings_and_output_weights);
  EXPECT_EQ(recipes::query_groups(a), 8);
  // TRAINING_ARGS this build runs.
  EXPECT_EQ(a.seed, 42);
  EXPECT_EQ(a.micro_batch_size, 4);
  EXPECT_EQ(a.global_batch_size, 16);
  EXPECT_EQ(a.train_iters, 100);
  EXPECT_DOUBLE_EQ(a.init_method_std, 0.086);
  EXPECT_TRUE(a.deprecated_use_mcore_models);
  EXPECT_FALSE(a.apply_rope_fusion);
  EXPECT_TRUE(a.use_flash_attn);
  EXPECT_FALSE(a.sequence_parallel);  // given, and turned off at tensor size 1 as Megatron does
  EXPECT_EQ(a.distributed_backend, "nccl");
  EXPECT_TRUE(a.qk_layernorm);
  EXPECT_DOUBLE_EQ(a.wait_after_ckpt, 0.0);
  // REGULARIZATION_ARGS, LEARNING_RATE_ARGS, MODEL_PARALLEL_ARGS, MIXED_PRECISION_ARGS.
  EXPECT_DOUBLE_EQ(a.weight_decay, 0.1);
  EXPECT_EQ(a.start_weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(a.adam_beta1, 0.9);
  EXPECT_DOUBLE_EQ(a.adam_beta2, 0.95);
  EXPECT_DOUBLE_EQ(a.clip_grad, 1.0);
  EXPECT_EQ(a.lr_decay_style, "cosine");
  EXPECT_EQ(a.lr_warmup_iters, 10);
  EXPECT_EQ(a.lr, 3e-4);
  EXPECT_EQ(a.tensor_model_parallel_size, 1);
  EXPECT_EQ(a.pipeline_model_parallel_size, 1);
  EXPECT_TRUE(a.bf16);
  EXPECT_TRUE(a.attention_softmax_in_fp32);
  EXPECT_TRUE(a.accumulate_allreduce_grads_in_fp32);  // Megatron's bf16 rule
  EXPECT_EQ(a.params_dtype, "torch.bfloat16");
  EXPECT_EQ(a.world_size, 2);
  EXPECT_EQ(a.data_parallel_size, 2);
  // DATA_PATH: token counts are the weights, normalised.
  ASSERT_TRUE(p.data_blend.has_value());
  const auto& b = *p.data_blend;
  ASSERT_EQ(b.prefixes.size(), 3u);
  EXPECT_EQ(b.prefixes[1], folder + "/data_11.txt_document");
  const double total = 234215.0 + 74019.0 + 209570.0;
  EXPECT_DOUBLE_EQ(b.weights[0], 234215.0 / total);
  EXPECT_DOUBLE_EQ(b.weights[1], 74019.0 / total);
  EXPECT_DOUBLE_EQ(b.weights[2], 209570.0 / total);
  EXPECT_EQ(b.num_sequences, (std::vector<int64_t>{23, 7, 20}));
  EXPECT_EQ(a.split, "949,50,1");
  // One info line per no-op flag (--use-mcore-models, --no-rope-fusion, --distributed-backend,
  // --wait-after-ckpt) and one for --sequence-parallel, turned off at tensor size 1.
  ASSERT_EQ(p.notes.size(), 5u);
  EXPECT_EQ(p.notes[2].find("--sequence-parallel: turned off because --tensor-model-parallel-size is 1"), 0u)
      << p.notes[2];
  EXPECT_EQ(p.notes[3].find("--distributed-backend nccl: no effect here; collectives run on qccl"), 0u)
      << p.notes[3];
}

// The whole TRAINING_ARGS: at pipeline size 1 only Megatron's own rule for
// virtual stages refuses them (nothing needs a missing feature); with the
// MOE_ARGS and a pipeline of 2 (8 layers: 2 virtual stages of 2 per rank)
// everything parses, expert parallelism carved from the data-parallel ranks.
TEST(MegatronSeedArgs, FullTrainingArgsParseWithAPipelineAndTheMoeArgs) {
  const SeedFlags s = load_seed_flags();
  const std::string err = parse_error(practice() + expand_array(s.arrays.at("TRAINING_ARGS")), 2);
  EXPECT_EQ(err.find("need features this build does not have yet"), std::string::npos) << err;
  EXPECT_NE(err.find("needs --pipeline-model-parallel-size > 1 (got 1)"), std::string::npos) << err;
  const Argv all =
      practice() + Argv{"--bf16"} + expand_array(s.arrays.at("MOE_ARGS")) + expand_array(s.arrays.at("TRAINING_ARGS")) +
      Argv{"--num-layers", "8", "--moe-layer-freq", "([0]*1+[1]*7)", "--pipeline-model-parallel-size", "2"};
  EXPECT_EQ(parse_error(all, 4), "");
  const auto p = recipes::parse_megatron_args(all, options(4));
  EXPECT_TRUE(p.args.multi_latent_attention);
  EXPECT_EQ(p.args.expert_model_parallel_size, 2);
  EXPECT_EQ(p.args.data_parallel_size, 2);
  EXPECT_TRUE(p.args.moe_shared_expert_overlap);
}

TEST(MegatronSeedArgs, MoeArgsParseToTheMoeFields) {
  const SeedFlags s = load_seed_flags();
  const Argv moe = practice() + Argv{"--bf16"} + expand_array(s.arrays.at("MOE_ARGS"));
  EXPECT_EQ(parse_error(moe, 2), "");
  const auto p = recipes::parse_megatron_args(moe, options(2));
  const auto& a = p.args;
  EXPECT_EQ(a.num_experts, 4);
  EXPECT_EQ(a.expert_model_parallel_size, 2);
  EXPECT_EQ(a.moe_token_dispatcher_type, "alltoall");
  EXPECT_EQ(a.moe_router_topk, 2);
  EXPECT_EQ(a.moe_router_num_groups, 2);
  EXPECT_EQ(a.moe_ffn_hidden_size, 704);
  EXPECT_TRUE(a.moe_grouped_gemm);
  EXPECT_TRUE(a.moe_permute_fusion);
  EXPECT_TRUE(p.notes.empty()) << p.notes[0];  // --moe-permute-fusion is the fused permutation, not a no-op
  // An expert tensor size other than the tensor size is refused, naming the flag.
  EXPECT_EQ(parse_error(moe + Argv{"--expert-tensor-parallel-size", "2"}, 2)
                .find("--expert-tensor-parallel-size 2: an expert tensor-parallel size other than the tensor size "
                      "is not built yet; "),
            0u);
}

TEST(MegatronSeedArgs, ParallelSizesAboveOneAreRefusedWithTheFeatureButTensorAndPipelineRun) {
  // Pipeline parallelism runs, interleaved too.
  EXPECT_EQ(parse_error(practice() + Argv{"--pipeline-model-parallel-size", "2"}, 2), "");
  EXPECT_EQ(parse_error(practice() + Argv{"--pipeline-model-parallel-size", "2",
                                          "--num-layers-per-virtual-pipeline-stage", "1"}, 2), "");
  EXPECT_EQ(parse_error(practice() + Argv{"--context-parallel-size=4"}, 4),
            "--context-parallel-size 4: context parallelism is not built yet; this build runs context size 1");
  // Tensor parallelism runs, with sequence parallelism on top.
  EXPECT_EQ(parse_error(practice() + Argv{"--tensor-model-parallel-size", "2", "--sequence-parallel"}, 4), "");
  const auto p = recipes::parse_megatron_args(practice() + Argv{"--tensor-model-parallel-size", "2",
                                                              "--sequence-parallel"}, options(4));
  EXPECT_TRUE(p.args.sequence_parallel);
  EXPECT_EQ(p.args.data_parallel_size, 2);
  EXPECT_TRUE(p.notes.empty()) << p.notes[0];
  // Size 1 everywhere is this build's layout.
  EXPECT_EQ(parse_error(practice() + Argv{"--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size",
                                          "1", "--expert-model-parallel-size", "1", "--context-parallel-size", "1"},
                        2),
            "");
  // One virtual stage holding all of a rank's layers is the plain schedule.
  EXPECT_EQ(parse_error(practice() + Argv{"--num-layers-per-virtual-pipeline-stage", "6"}), "");
}

}  // namespace
}  // namespace qk::test
