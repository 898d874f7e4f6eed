// Megatron's validate_args rules: derived defaults and errors naming flags and values.
#include <gtest/gtest.h>

#include "megatron_args_test_util.h"

namespace qk::test {
namespace {

recipes::MegatronArgs parsed(const Argv& extra, int64_t world_size = 1) {
  return recipes::parse_megatron_args(practice() + extra, options(world_size)).args;
}

// Validation alone (no status check), for rules of features this build refuses.
recipes::MegatronArgs validated(const Argv& argv, int64_t world_size = 1) {
  auto p = recipes::parse_megatron_flags(argv);
  recipes::validate_megatron_args(p.args, options(world_size));
  return p.args;
}
std::string validate_error(const Argv& argv, int64_t world_size = 1) {
  return error_of([&] { validated(argv, world_size); });
}

TEST(MegatronArgsValidate, FeedForwardSizeDefaultsAreMegatrons) {
  EXPECT_EQ(parsed({}).ffn_hidden_size, 1344);  // --swiglu: int(4*512*2/3/64)*64
  auto a = validated(practice_training() + Argv{"--num-layers", "2", "--hidden-size", "512",
                                                "--num-attention-heads", "8", "--seq-length", "64",
                                                "--max-position-embeddings", "64"});
  EXPECT_EQ(a.ffn_hidden_size, 2048);  // 4 x hidden
  a = validated(practice() + Argv{"--hidden-size", "4096", "--num-attention-heads", "32"});
  EXPECT_EQ(a.ffn_hidden_size, 10880);  // Llama-7B sizes give 11008 explicitly; Megatron's rule gives this
  EXPECT_EQ(parsed({"--ffn-hidden-size", "1408"}).ffn_hidden_size, 1408);
}

TEST(MegatronArgsValidate, HeadsAndQueryGroups) {
  auto a = parsed({});
  EXPECT_EQ(a.kv_channels, 64);
  EXPECT_EQ(recipes::query_groups(a), 8);  // no GQA: one group per head
  a = parsed({"--group-query-attention", "--num-query-groups", "2"});
  EXPECT_EQ(recipes::query_groups(a), 2);
  QK_EXPECT_PARSE_ERROR(practice() + Argv{"--num-attention-heads", "7"},
                        "--hidden-size (512) must be divisible by --num-attention-heads (7) unless --kv-channels is "
                        "given");
  // With --kv-channels Megatron allows it.
  EXPECT_EQ(parsed({"--num-attention-heads", "7", "--kv-channels", "64"}).kv_channels, 64);
  QK_EXPECT_PARSE_ERROR(practice() + Argv{"--group-query-attention", "--num-query-groups", "3"},
                        "--num-attention-heads (8) must be divisible by --num-query-groups (3)");
  // num_query_groups matters only with --group-query-attention, as in Megatron.
  EXPECT_EQ(recipes::query_groups(parsed({"--num-query-groups", "3"})), 8);
}

TEST(MegatronArgsValidate, GlobalBatchAgainstMicroBatchAndDataParallelSize) {
  auto a = parsed({}, 2);
  EXPECT_EQ(a.data_parallel_size, 2);
  EXPECT_EQ(a.global_batch_size, 16);
  EXPECT_EQ(parse_error(practice() + Argv{"--global-batch-size", "12"}, 2),
            "--global-batch-size (12) must be divisible by --micro-batch-size (4) x data-parallel size (2) = 8; "
            "the data-parallel size is the world size (2) / (tensor x pipeline x context parallel sizes)");
  // Without --global-batch-size: micro x data-parallel (one micro-batch per step).
  a = recipes::parse_megatron_args(practice_model() + Argv{"--micro-batch-size", "3", "--train-iters", "10", "--lr",
                                                         "0.1", "--mock-data"},
                                 options(4))
          .args;
  EXPECT_EQ(a.global_batch_size, 12);
  EXPECT_EQ(validate_error(practice() + Argv{"--tensor-model-parallel-size", "2"}, 3),
            "world size (3) is not divisible by --tensor-model-parallel-size (2) x --pipeline-model-parallel-size "
            "(1) x --context-parallel-size (1) = 2");
  QK_EXPECT_PARSE_ERROR(practice() + Argv{"--micro-batch-size", "0"}, "--micro-batch-size must be positive, got 0");
}

// What the world size breaks is a WorldSizeError (qk exits 78 and qk run
// ends the job rather than restart into it); what it cannot fix is not.
TEST(MegatronArgsValidate, SizesTheWorldSizeBreaksAreWorldSizeErrors) {
  EXPECT_THROW(recipes::parse_megatron_args(practice() + Argv{"--global-batch-size", "12"}, options(2)),
               WorldSizeError);  // 12 = 3 micro-batches of 4: 2 ranks cannot share them
  EXPECT_THROW(validated(practice() + Argv{"--tensor-model-parallel-size", "2"}, 3), WorldSizeError);
  try {
    recipes::parse_megatron_args(practice() + Argv{"--global-batch-size", "6"}, options(1));
    ADD_FAILURE() << "6 is not a multiple of the micro-batch 4";
  } catch (const WorldSizeError&) {
    ADD_FAILURE() << "no world size fixes a global batch that is not a multiple of the micro-batch";
  } catch (const ValueError&) {
  }
}

// Tensor-parallel sizes that do not split the model: errors naming both flags.
TEST(MegatronArgsValidate, TensorParallelSizesThatDoNotSplitNameTheFlags) {
  EXPECT_EQ(validate_error(practice() + Argv{"--tensor-model-parallel-size", "3"}, 3),
            "--num-attention-heads (8) must be divisible by --tensor-model-parallel-size (3)");
  EXPECT_EQ(validate_error(practice() + Argv{"--group-query-attention", "--num-query-groups", "2",
                                             "--tensor-model-parallel-size", "4"},
                           4),
            "--num-query-groups (2) must be divisible by --tensor-model-parallel-size (4)");
  EXPECT_EQ(validate_error(practice() + Argv{"--ffn-hidden-size", "1346", "--tensor-model-parallel-size", "4"}, 4),
            "--ffn-hidden-size (1346) must be divisible by --tensor-model-parallel-size (4)");
  // SwiGLU's default width int(8h/3/64)*64 is 640 for hidden 256, which 3 ranks do not split.
  EXPECT_EQ(validate_error(practice() + Argv{"--hidden-size", "256", "--num-attention-heads", "6", "--kv-channels",
                                             "32", "--tensor-model-parallel-size", "3"},
                           3),
            "--ffn-hidden-size (640) must be divisible by --tensor-model-parallel-size (3) (the default from "
            "--hidden-size; give --ffn-hidden-size)");
  EXPECT_EQ(validate_error(practice() + Argv{"--seq-length", "1022", "--tensor-model-parallel-size", "4",
                                             "--sequence-parallel"},
                           4),
            "--seq-length (1022) must be divisible by --tensor-model-parallel-size (4) with --sequence-parallel: "
            "each rank holds an equal block of the sequence");
  // Without --sequence-parallel any sequence length splits (the heads do).
  EXPECT_EQ(validated(practice() + Argv{"--seq-length", "1022", "--tensor-model-parallel-size", "4"}, 4)
                .data_parallel_size,
            1);
}

TEST(MegatronArgsValidate, RequiredSizes) {
  const Argv t = practice_training();
  EXPECT_EQ(parse_error(t + Argv{"--hidden-size", "8"}), "--num-layers is required");
  EXPECT_EQ(parse_error(t + Argv{"--num-layers", "2", "--hidden-size", "8", "--num-attention-heads", "2",
                                 "--max-position-embeddings", "8"}),
            "--seq-length is required");
  EXPECT_EQ(parse_error(t + Argv{"--num-layers", "2", "--hidden-size", "8", "--num-attention-heads", "2",
                                 "--seq-length", "8"}),
            "--max-position-embeddings is required");
  QK_EXPECT_PARSE_ERROR(practice_model() + Argv{"--micro-batch-size", "1", "--lr", "1", "--mock-data"},
                        "give --train-iters or --train-samples");
  QK_EXPECT_PARSE_ERROR(practice_model() + Argv{"--micro-batch-size", "1", "--train-iters", "5", "--mock-data"},
                        "--lr is required");
  QK_EXPECT_PARSE_ERROR(practice_model() + Argv{"--train-iters", "5", "--lr", "1", "--mock-data"},
                        "--micro-batch-size is required");
  // Without a training run (e.g. reading a checkpoint's arguments) only the model is required.
  recipes::MegatronArgsOptions o = options();
  o.require_training = false;
  EXPECT_NO_THROW(recipes::parse_megatron_args(practice_model() + Argv{"--micro-batch-size", "1"}, o));
}

TEST(MegatronArgsValidate, SequenceAndPositions) {
  EXPECT_EQ(parse_error(practice() + Argv{"--seq-length", "2048"}),
            "--max-position-embeddings (1024) must be >= --seq-length (2048)");
  QK_EXPECT_PARSE_ERROR(practice() + Argv{"--position-embedding-type", "learned_absolute", "--no-position-embedding"},
                        "Megatron accepts it only with --position-embedding-type rope; got learned_absolute");
  auto a = parsed({"--position-embedding-type", "learned_absolute"});
  EXPECT_FALSE(a.apply_rope_fusion);  // Megatron: no rope, no rope fusion
  a = parsed({"--position-embedding-type", "none", "--use-rotary-position-embeddings"});
  EXPECT_EQ(a.position_embedding_type, "rope");
  EXPECT_EQ(parse_error(practice() + Argv{"--position-embedding-type", "mrope"}),
            "--position-embedding-type mrope: this position embedding type is not built yet; this build "
            "has learned_absolute, rope and none");
  QK_EXPECT_PARSE_ERROR(practice() + Argv{"--rotary-percent", "0"}, "--rotary-percent must be in (0, 1], got 0");
  QK_EXPECT_PARSE_ERROR(practice() + Argv{"--hidden-dropout", "1.5"},
                        "--hidden-dropout must be a probability in [0, 1], got 1.5");
}

TEST(MegatronArgsValidate, IterationsSamplesAndWarmup) {
  QK_EXPECT_PARSE_ERROR(practice() + Argv{"--train-samples", "1000"},
                        "--train-iters and --train-samples cannot both be given");
  QK_EXPECT_PARSE_ERROR(practice() + Argv{"--lr-warmup-fraction", "0.1", "--lr-warmup-iters", "5"},
                        "give only one of --lr-warmup-fraction and --lr-warmup-iters");
  QK_EXPECT_PARSE_ERROR(practice() + Argv{"--lr-warmup-samples", "64"},
                        "--lr-warmup-samples goes with --train-samples, not --train-iters");
  QK_EXPECT_PARSE_ERROR(practice() + Argv{"--lr-warmup-iters", "100"},
                        "--lr-warmup-iters (100) must be smaller than the LR decay length (100 iterations, from "
                        "--train-iters)");
  QK_EXPECT_PARSE_ERROR(practice() + Argv{"--lr-warmup-iters", "50", "--lr-decay-iters", "40"},
                        "(40 iterations, from --lr-decay-iters)");
  QK_EXPECT_PARSE_ERROR(practice() + Argv{"--lr-decay-style", "WSD"},
                        "--lr-decay-style WSD needs --lr-wsd-decay-iters");
  QK_EXPECT_PARSE_ERROR(practice() + Argv{"--min-lr", "1e-3"}, "--min-lr (0.001) must not exceed --lr (0.0003)");
  // Sample-based training.
  Argv s = practice_model() + Argv{"--micro-batch-size", "4", "--lr", "1e-3", "--mock-data", "--train-samples",
                                   "6400", "--lr-warmup-samples", "640", "--lr-decay-samples", "6000"};
  const auto a = recipes::parse_megatron_args(s, options()).args;
  EXPECT_EQ(a.train_samples, 6400);
  EXPECT_EQ(a.lr_warmup_samples, 640);
  QK_EXPECT_PARSE_ERROR(s + Argv{"--lr-warmup-iters", "3"},
                        "--lr-warmup-iters goes with --train-iters, not --train-samples");
}

TEST(MegatronArgsValidate, PrecisionRules) {
  QK_EXPECT_PARSE_ERROR(practice() + Argv{"--bf16", "--fp16"}, "--fp16 and --bf16 cannot both be given");
  auto a = parsed({"--bf16"});
  EXPECT_EQ(a.params_dtype, "torch.bfloat16");
  EXPECT_TRUE(a.accumulate_allreduce_grads_in_fp32);
  a = parsed({"--fp16"});
  EXPECT_EQ(a.params_dtype, "torch.float16");
  EXPECT_FALSE(a.check_for_nan_in_loss_and_grad);  // dynamic loss scaling owns NaNs
  EXPECT_TRUE(parsed({"--fp16", "--loss-scale", "1024"}).check_for_nan_in_loss_and_grad);
  QK_EXPECT_PARSE_ERROR(practice() + Argv{"--fp16-lm-cross-entropy"}, "--fp16-lm-cross-entropy needs --fp16");
  EXPECT_TRUE(parsed({"--fp16", "--fp16-lm-cross-entropy"}).fp16_lm_cross_entropy);
}

TEST(MegatronArgsValidate, WeightDecayCheckpointsAndOptimizerRanges) {
  auto a = parsed({"--weight-decay", "0.1"});
  EXPECT_EQ(a.start_weight_decay, 0.1);
  EXPECT_EQ(a.end_weight_decay, 0.1);
  QK_EXPECT_PARSE_ERROR(practice() + Argv{"--weight-decay-incr-style", "linear"},
                        "--weight-decay-incr-style linear needs --start-weight-decay and --end-weight-decay");
  a = parsed({"--weight-decay-incr-style", "cosine", "--start-weight-decay", "0", "--end-weight-decay", "0.1"});
  EXPECT_EQ(a.end_weight_decay, 0.1);
  QK_EXPECT_PARSE_ERROR(practice() + Argv{"--save", "ckpt"}, "--save ckpt needs --save-interval");
  EXPECT_EQ(parsed({"--save", "ckpt", "--save-interval", "10"}).save, "ckpt");
  QK_EXPECT_PARSE_ERROR(practice() + Argv{"--adam-beta2", "1.0"}, "--adam-beta2 must be in [0, 1), got 1");
  QK_EXPECT_PARSE_ERROR(practice() + Argv{"--seed", "-1"}, "--seed must be in [0, 2^32)");
}

TEST(MegatronArgsValidate, DataSourcesSplitAndTokenizer) {
  const Argv model = practice_model() + Argv{"--micro-batch-size", "4", "--train-iters", "10", "--lr", "1e-3"};
  QK_EXPECT_PARSE_ERROR(model, "no training data: give --data-path, --train-data-path or --mock-data");
  QK_EXPECT_PARSE_ERROR(model + Argv{"--mock-data", "--data-path", "a_document"},
                        "give one data source: --mock-data, --data-path, or --train/valid/test-data-path");
  auto a = recipes::parse_megatron_args(model + Argv{"--data-path", "a_document"}, options()).args;
  EXPECT_EQ(a.split, "969, 30, 1");  // Megatron's legacy default
  QK_EXPECT_PARSE_ERROR(model + Argv{"--data-path", "a", "--split", "90,5,4,1"},
                        "--split '90,5,4,1' needs 1 to 3 proportions");
  QK_EXPECT_PARSE_ERROR(model + Argv{"--data-path", "a", "--split", "0,0,0"}, "--split '0,0,0' proportions sum to 0");
  QK_EXPECT_PARSE_ERROR(model + Argv{"--mock-data", "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", "v.json"},
                        "--tokenizer-type GPT2BPETokenizer needs --vocab-file and --merge-file");
  QK_EXPECT_PARSE_ERROR(model + Argv{"--mock-data", "--tokenizer-type", "NullTokenizer"},
                        "--tokenizer-type NullTokenizer needs --vocab-size");
  EXPECT_EQ(parse_error(model + Argv{"--mock-data", "--tokenizer-type", "TikTokenizer", "--tokenizer-model", "t"}),
            "--tokenizer-type TikTokenizer: this tokenizer type is not built yet; "
            "this build reads HuggingFaceTokenizer, GPT2BPETokenizer, SentencePieceTokenizer and NullTokenizer");
}

TEST(MegatronArgsValidate, PaddedVocabulary) {
  auto a = parsed({});
  EXPECT_EQ(recipes::padded_vocab_size(a, 50257), 50304);  // multiple of 128
  a.tensor_model_parallel_size = 2;
  EXPECT_EQ(recipes::padded_vocab_size(a, 50257), 50432);  // multiple of 128 x 2
  a = parsed({"--padded-vocab-size", "50400"});
  EXPECT_EQ(recipes::padded_vocab_size(a, 50257), 50400);
  EXPECT_THROW(recipes::padded_vocab_size(a, 60000), ValueError);
}

// Rules of features this build refuses (checked with validation alone), ready for when they land.
TEST(MegatronArgsValidate, RulesOfRefusedFeatures) {
  const Argv base = practice() + Argv{"--num-layers", "8"};
  auto a = validated(base + Argv{"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage",
                                 "2"},
                     2);
  EXPECT_EQ(a.virtual_pipeline_model_parallel_size, 2);  // 8 layers / 2 stages / 2 per virtual stage
  EXPECT_TRUE(a.overlap_p2p_comm);
  a = validated(base + Argv{"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "4"}, 2);
  EXPECT_EQ(a.virtual_pipeline_model_parallel_size, std::nullopt);
  EXPECT_FALSE(a.overlap_p2p_comm);
  EXPECT_EQ(validate_error(base + Argv{"--pipeline-model-parallel-size", "3"}, 3),
            "--num-layers (8) must be divisible by --pipeline-model-parallel-size (3)");
  EXPECT_EQ(validate_error(base + Argv{"--recompute-granularity", "full"}),
            "--recompute-granularity full needs --recompute-method and --recompute-num-layers");
  EXPECT_EQ(validate_error(base + Argv{"--recompute-granularity", "selective", "--recompute-method", "block"}),
            "--recompute-method block does not go with --recompute-granularity selective");
  EXPECT_EQ(validate_error(base + Argv{"--recompute-granularity", "selective", "--recompute-num-layers", "2"}),
            "--recompute-num-layers 2 does not go with --recompute-granularity selective");
  EXPECT_EQ(validate_error(base + Argv{"--recompute-method", "uniform", "--recompute-num-layers", "2"}),
            "--recompute-method uniform needs --recompute-granularity full");
  EXPECT_EQ(validate_error(base + Argv{"--recompute-granularity", "full", "--recompute-method", "block",
                                       "--recompute-num-layers", "9"}),
            "--recompute-num-layers (9) exceeds the layers per pipeline stage (8)");
  EXPECT_EQ(validated(base + Argv{"--recompute-activations"}).recompute_granularity, "selective");
  EXPECT_EQ(validate_error(base + Argv{"--overlap-param-gather"}),
            "--overlap-param-gather needs --use-distributed-optimizer");
  EXPECT_EQ(validate_error(base + Argv{"--use-distributed-optimizer", "--overlap-param-gather"}),
            "--overlap-param-gather needs --overlap-grad-reduce");
  EXPECT_EQ(validate_error(base + Argv{"--ddp-bucket-size", "0"}), "--ddp-bucket-size must be positive, got 0");
  EXPECT_FALSE(validated(base + Argv{"--sequence-parallel"}).sequence_parallel);  // Megatron: off at TP 1
  a = validated(base + Argv{"--num-experts", "4", "--moe-layer-freq", "([0]*1+[1]*7)"});
  EXPECT_EQ(a.moe_ffn_hidden_size, a.ffn_hidden_size);
  EXPECT_EQ(validate_error(base + Argv{"--num-experts", "4", "--moe-layer-freq", "[1]*6"}),
            "--moe-layer-freq has 6 entries but --num-layers is 8");
  EXPECT_EQ(validate_error(base + Argv{"--num-experts", "4", "--moe-router-topk", "5"}),
            "moe_router_topk (--moe-router-topk 5) must be between 1 and num_moe_experts (4)");
  // The model config's MoE rules, checked while the arguments are validated.
  EXPECT_EQ(validate_error(base + Argv{"--num-experts", "4", "--moe-router-enable-expert-bias"})
                .find("moe_router_enable_expert_bias (--moe-router-enable-expert-bias) needs"),
            0u);
  EXPECT_EQ(validate_error(base + Argv{"--expert-model-parallel-size", "2"}, 2),
            "--expert-model-parallel-size 2 needs --num-experts");
  EXPECT_EQ(validate_error(base + Argv{"--num-experts", "0"}), "");  // 0 means no MoE
  EXPECT_EQ(validated(base + Argv{"--num-experts", "0"}).num_experts, std::nullopt);
}

}  // namespace
}  // namespace qk::test
