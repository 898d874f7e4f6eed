// The pieces of `qk pretrain-gpt` (qk/recipes/gpt_pretrain.h): Megatron's
// arguments mapped onto the model, optimizer and schedule; its sampler and
// batches; its log lines; and a tiny model overfitting one batch.
#include "qk/recipes/gpt_pretrain.h"

#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "megatron_args_test_util.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/generator.h"
#include "qk/train/step_runner.h"
#include "qk/transformer/gpt_model.h"

namespace qk::test {
namespace {

recipes::MegatronArgs validated(const Argv& argv, int64_t world = 1) {
  return recipes::parse_megatron_args(argv, options(world)).args;
}

Argv tiny() {
  return {"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "16",
          "--max-position-embeddings", "16", "--micro-batch-size", "2", "--global-batch-size", "8",
          "--train-iters", "10", "--lr", "1e-3", "--mock-data", "--tokenizer-type", "NullTokenizer",
          "--vocab-size", "100"};
}

TEST(GptPretrain, ModelFlagsMapOntoTheTransformerConfig) {
  const SeedFlags s = load_seed_flags();
  // The seed's MODEL_ARGS with the practice sizes (8 heads), --qk-layernorm and --bf16.
  const auto a = validated(expand_array(s.arrays.at("MODEL_ARGS")) + practice_training() +
                           Argv{"--num-attention-heads", "8", "--qk-layernorm", "--bf16", "--init-method-std", "0.006",
                                "--group-query-attention", "--num-query-groups", "2", "--rotary-base", "500000",
                                "--make-vocab-size-divisible-by", "64"});
  const auto c = recipes::gpt_transformer_config(a, 50257);
  EXPECT_EQ(c.num_layers, 6);
  EXPECT_EQ(c.hidden_size, 512);
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.num_query_groups, 2);
  EXPECT_EQ(c.kv_channels, 64);
  EXPECT_EQ(c.ffn_hidden_size, 1408);  // the seed's $FFN_HIDDEN_SIZE
  EXPECT_TRUE(c.is_swiglu());
  EXPECT_EQ(c.normalization, transformer::Normalization::RMSNorm);
  EXPECT_DOUBLE_EQ(c.layernorm_epsilon, 1e-6);
  EXPECT_EQ(c.position_embedding_type, transformer::PositionEmbeddingType::rope);
  EXPECT_DOUBLE_EQ(c.rotary_base, 500000);
  EXPECT_FALSE(c.add_bias_linear);
  EXPECT_FALSE(c.add_qkv_bias);
  EXPECT_FALSE(c.share_embeddings_and_output_weights);
  EXPECT_TRUE(c.qk_layernorm);
  EXPECT_DOUBLE_EQ(c.hidden_dropout, 0.0);
  EXPECT_DOUBLE_EQ(c.attention_dropout, 0.0);
  EXPECT_DOUBLE_EQ(c.init_method_std, 0.006);
  EXPECT_EQ(c.params_dtype, DType::bf16);
  EXPECT_EQ(c.seq_length, 1024);
  EXPECT_EQ(c.max_position_embeddings, 1024);
  EXPECT_EQ(c.padded_vocab_size(), 50304);  // 50257 up to a multiple of 64
  EXPECT_TRUE(c.attention_softmax_in_fp32);

  // GPT-2 layout: learned positions, LayerNorm with biases, GELU, tied output, 1p norms, QKV bias alone.
  const auto g = recipes::gpt_transformer_config(
      validated(tiny() + Argv{"--apply-layernorm-1p", "--disable-bias-linear", "--add-qkv-bias", "--padded-vocab-size",
                              "256", "--no-masked-softmax-fusion"}),
      101);
  EXPECT_EQ(g.position_embedding_type, transformer::PositionEmbeddingType::learned_absolute);
  EXPECT_EQ(g.normalization, transformer::Normalization::LayerNorm);
  EXPECT_FALSE(g.gated_linear_unit);
  EXPECT_EQ(g.ffn_hidden_size, 256);
  EXPECT_TRUE(g.share_embeddings_and_output_weights);
  EXPECT_TRUE(g.layernorm_zero_centered_gamma);
  EXPECT_TRUE(g.add_qkv_bias);
  EXPECT_EQ(g.padded_vocab_size(), 256);
  EXPECT_FALSE(g.attention_softmax_in_fp32);  // Megatron's unfused softmax runs in the parameters' dtype
  EXPECT_EQ(g.params_dtype, DType::f32);
}

// Megatron pads the vocabulary to a multiple of --make-vocab-size-divisible-by
// x the tensor-parallel size; --padded-vocab-size is exact at any size that
// divides it, and an error naming both flags at one that does not.
TEST(GptPretrain, PaddedVocabularySplitsOverTensorParallelRanks) {
  auto c = recipes::gpt_transformer_config(validated(tiny() + Argv{"--tensor-model-parallel-size", "2"}, 2), 4097);
  EXPECT_EQ(c.padded_vocab_size(), 4352);  // a multiple of 128 x 2
  EXPECT_EQ(c.tensor_model_parallel_size, 2);
  c = recipes::gpt_transformer_config(validated(tiny() + Argv{"--padded-vocab-size", "4352"}), 4097);
  EXPECT_EQ(c.padded_vocab_size(), 4352);
  c = recipes::gpt_transformer_config(
      validated(tiny() + Argv{"--padded-vocab-size", "4224", "--tensor-model-parallel-size", "2"}, 2), 4097);
  EXPECT_EQ(c.padded_vocab_size(), 4224);
  EXPECT_EQ(error_of([&] {
              recipes::gpt_transformer_config(
                  validated(tiny() + Argv{"--padded-vocab-size", "4226", "--tensor-model-parallel-size", "4"}, 4),
                  4097);
            }),
            "--padded-vocab-size (4226) must be divisible by --tensor-model-parallel-size (4): each rank holds an "
            "equal block of vocabulary rows");
  // --sequence-parallel reaches the model only above tensor size 1.
  EXPECT_TRUE(recipes::gpt_transformer_config(
                  validated(tiny() + Argv{"--tensor-model-parallel-size", "2", "--sequence-parallel"}, 2), 100)
                  .sequence_parallel);
  EXPECT_FALSE(recipes::gpt_transformer_config(validated(tiny() + Argv{"--sequence-parallel"}), 100).sequence_parallel);
}

// The bytes line after each iteration line: per group, the calls' buffers by
// kind and what the wire carried.
TEST(GptPretrain, TrafficLineNamesEachGroupsBytes) {
  train::GroupVolume tp;
  tp.group = "tp";
  tp.all_gather = 1.5e6;
  tp.reduce_scatter = 1.5e6;
  tp.all_reduce = 0.25e6;
  tp.calls = 30;
  tp.wire_sent = 1.6e6;
  train::GroupVolume dp;
  dp.group = "dp";
  dp.all_reduce = 2.1e6;
  dp.calls = 2;
  dp.wire_sent = 2.1e6;
  EXPECT_EQ(recipes::traffic_line({tp, dp}),
            " [qk] bytes per iteration: tp 3.25 MB in 30 calls (all-reduce 0.25 MB, all-gather 1.50 MB, "
            "reduce-scatter 1.50 MB), 1.60 MB sent | dp 2.10 MB in 2 calls (all-reduce 2.10 MB), 2.10 MB sent |");
}

TEST(GptPretrain, OptimizerScheduleAndScalerFollowTheFlags) {
  auto a = validated(tiny() + Argv{"--lr-decay-style", "cosine", "--lr-warmup-iters", "2", "--min-lr", "1e-4",
                                   "--weight-decay", "0.1", "--clip-grad", "0.5"});
  auto so = recipes::gpt_scheduler_options(a);
  EXPECT_EQ(so.lr_decay_style, "cosine");
  EXPECT_DOUBLE_EQ(so.max_lr, 1e-3);
  EXPECT_DOUBLE_EQ(so.min_lr, 1e-4);
  EXPECT_DOUBLE_EQ(so.lr_warmup_steps, 16);  // 2 iterations x 8 samples
  EXPECT_EQ(so.lr_decay_steps, 80);
  EXPECT_DOUBLE_EQ(so.start_wd, 0.1);
  EXPECT_DOUBLE_EQ(recipes::gpt_mixed_precision_options(a).clip_grad, 0.5);
  EXPECT_EQ(recipes::gpt_loss_scaler(a), nullptr);  // fp32: no scaler

  auto fp16 = recipes::gpt_loss_scaler(validated(tiny() + Argv{"--fp16", "--initial-loss-scale", "65536"}));
  ASSERT_NE(dynamic_cast<optim::DynamicLossScaler*>(fp16.get()), nullptr);
  EXPECT_FLOAT_EQ(fp16->scale(), 65536.0f);
  auto constant = recipes::gpt_loss_scaler(validated(tiny() + Argv{"--bf16", "--loss-scale", "128"}));
  ASSERT_NE(dynamic_cast<optim::ConstantLossScaler*>(constant.get()), nullptr);
  EXPECT_EQ(recipes::gpt_loss_scaler(validated(tiny() + Argv{"--bf16"})), nullptr);

  auto to = recipes::gpt_trainer_options(
      validated(tiny() + Argv{"--save", "ck", "--save-interval", "5", "--exit-interval", "7", "--no-load-rng",
                              "--exit-signal-handler", "--eval-interval", "4", "--eval-iters", "3"}),
      "out");
  EXPECT_EQ(to.save, "ck");
  EXPECT_EQ(to.save_interval, 5);
  EXPECT_EQ(to.exit_interval, 7);
  EXPECT_TRUE(to.no_load_rng);
  EXPECT_TRUE(to.exit_signal_handler);
  EXPECT_EQ(to.eval_interval, 4);
  EXPECT_EQ(to.eval_iters, 3);
  EXPECT_EQ(to.metrics_file, "out/metrics.jsonl");
  EXPECT_EQ(to.tokens_per_sample, 16);
}

TEST(GptPretrain, SampleCountsAreMegatrons) {
  const auto c = recipes::gpt_sample_counts(
      validated(tiny() + Argv{"--train-iters", "100", "--eval-interval", "10", "--eval-iters", "2"}));
  EXPECT_EQ(c.train, 800);
  EXPECT_EQ(c.valid, (100 / 10 + 1) * 2 * 8);
  EXPECT_EQ(c.test, 2 * 8);
}

// Sample i holds i * 1000 + t at position t.
class CountingSamples : public data::GptSamples {
 public:
  CountingSamples(size_t n, int64_t seq) : n_(n), seq_(seq) {}
  size_t size() const override { return n_; }
  std::vector<int64_t> sample(size_t i) const override {
    std::vector<int64_t> s(static_cast<size_t>(seq_ + 1));
    for (int64_t t = 0; t <= seq_; ++t) s[static_cast<size_t>(t)] = static_cast<int64_t>(i) * 1000 + t;
    return s;
  }

 private:
  size_t n_;
  int64_t seq_;
};

TEST(GptPretrain, BatchesFollowMegatronsSamplerAndGetBatch) {
  auto samples = std::make_shared<CountingSamples>(40, 4);
  // Two ranks, micro-batch 3: global micro-batch k is samples 6k..6k+5, rank r takes 3r..3r+2.
  recipes::GptBatchIterator r0(samples, 0, 3, 0, 2, {}), r1(samples, 0, 3, 1, 2, {});
  const recipes::GptBatch a = r0.next(), b = r1.next();
  EXPECT_EQ(a.tokens.to_vector<int64_t>()[0], 0);
  EXPECT_EQ(a.tokens.to_vector<int64_t>()[4], 1000);     // row 1 is sample 1
  EXPECT_EQ(b.tokens.to_vector<int64_t>()[0], 3000);     // rank 1 starts at sample 3
  EXPECT_EQ(a.labels.to_vector<int64_t>()[0], 1);        // labels are the next tokens
  EXPECT_EQ(a.position_ids.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(a.loss_mask.to_vector<float>(), std::vector<float>(12, 1.0f));
  EXPECT_EQ(r0.next().tokens.to_vector<int64_t>()[0], 6000);
  EXPECT_EQ(r0.consumed_samples(), 12);
  // Resuming at 12 consumed samples gives the third global micro-batch, on any number of ranks.
  recipes::GptBatchIterator one_rank(samples, 12, 2, 0, 1, {});
  EXPECT_EQ(one_rank.next().tokens.to_vector<int64_t>()[0], 12000);
  // The dataset ends: whole global micro-batches only.
  recipes::GptBatchIterator tail(samples, 36, 3, 0, 2, {});
  EXPECT_THROW(tail.next(), ValueError);
  recipes::GptBatchIterator done(samples, 40, 3, 0, 2, {});  // a finished run: fine until it asks for more
  EXPECT_THROW(done.next(), ValueError);
}

// A sample with pad and eod ids in it.
class FixedSamples : public data::GptSamples {
 public:
  explicit FixedSamples(std::vector<int64_t> s) : s_(std::move(s)) {}
  size_t size() const override { return 8; }
  std::vector<int64_t> sample(size_t) const override { return s_; }

 private:
  std::vector<int64_t> s_;
};

TEST(GptPretrain, PadLabelsAndEodTokensAreMaskedAsMegatronDoes) {
  auto samples = std::make_shared<FixedSamples>(std::vector<int64_t>{5, 9, 6, 7, -1, -1});
  const recipes::GptBatch b = recipes::GptBatchIterator(samples, 0, 1, 0, 1, {.eod = 9, .pad = -1}).next();
  EXPECT_EQ(b.tokens.to_vector<int64_t>(), (std::vector<int64_t>{5, 9, 6, 7, 0}));  // pad -> 0
  EXPECT_EQ(b.labels.to_vector<int64_t>(), (std::vector<int64_t>{9, 6, 7, 0, 0}));
  EXPECT_EQ(b.loss_mask.to_vector<float>(), (std::vector<float>{1, 1, 1, 0, 0}));  // pad labels
  const recipes::GptBatch e =
      recipes::GptBatchIterator(samples, 0, 1, 0, 1, {.eod = 9, .pad = -1, .eod_mask_loss = true}).next();
  EXPECT_EQ(e.loss_mask.to_vector<float>(), (std::vector<float>{1, 0, 1, 0, 0}));  // and the eod token
}

train::LogStats example_stats() {
  train::LogStats s;
  s.iteration = 10;
  s.train_iters = 100;
  s.consumed_samples = 640;
  s.elapsed_ms_per_iteration = 123.44;
  s.learning_rate = 1.5e-4;
  s.global_batch_size = 64;
  s.losses["lm loss"] = 7.1234564;
  s.loss_scale = 1.0f;
  s.grad_norm = 1.2344;
  s.tflops_per_rank = 1.23;
  return s;
}

TEST(GptPretrain, IterationLineIsMegatronsFormat) {
  recipes::IterationLineExtras x;
  x.timestamp = "2026-12-01 16:00:00";
  x.log_throughput = true;
  // Python: the same numbers through training_log's format strings.
  EXPECT_EQ(recipes::megatron_iteration_line(example_stats(), x),
            " [2026-12-01 16:00:00] iteration       10/     100 | consumed samples:          640 | elapsed time "
            "per iteration (ms): 123.4 | throughput per GPU (TFLOP/s/GPU): 1.2 | learning rate: 1.500000E-04 | "
            "global batch size:    64 | lm loss: 7.123456E+00 | loss scale: 1.0 | grad norm: 1.234 | number of "
            "skipped iterations:   0 | number of nan iterations:   0 |");
  // Without --log-throughput no throughput; a skipped iteration has no grad norm; params norm and zeros when asked.
  train::LogStats s = example_stats();
  s.grad_norm = std::nan("");
  s.num_zeros_in_grad = 12;
  s.skipped_iterations = 1;
  x.log_throughput = false;
  x.params_norm = 45.6789;
  const std::string l = recipes::megatron_iteration_line(s, x);
  EXPECT_EQ(l.find("throughput"), std::string::npos) << l;
  EXPECT_EQ(l.find("grad norm"), std::string::npos) << l;
  EXPECT_NE(l.find("| num zeros: 12.0 | params norm: 45.679 | number of skipped iterations:   1 |"), std::string::npos)
      << l;
  // The regex log parsers use on Megatron's lines.
  const std::regex megatron(
      R"(^ \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] iteration +(\d+)/ +(\d+) \| consumed samples: +\d+ \| elapsed time per iteration \(ms\): [\d.]+ \|.* learning rate: \d\.\d{6}E[+-]\d\d \| global batch size: +\d+ \| lm loss: \d\.\d{6}E[+-]\d\d \| loss scale: [\d.]+ \|.* number of skipped iterations: +\d+ \| number of nan iterations: +\d+ \|$)");
  EXPECT_TRUE(std::regex_match(recipes::megatron_iteration_line(example_stats(), {}), megatron));
}

TEST(GptPretrain, ValidationBlockIsMegatronsFormat) {
  const std::string block = recipes::megatron_validation_block("iteration 100", {{"lm loss", 5.4}});
  const std::string line =
      " validation loss at iteration 100 | lm loss value: 5.400000E+00 | lm loss PPL: 2.214064E+02 | ";
  const std::string dashes(line.size() + 1, '-');
  EXPECT_EQ(block, dashes + "\n" + line + "\n" + dashes);
  // PPL is exp(min(20, loss)).
  EXPECT_NE(recipes::megatron_validation_block("x", {{"lm loss", 30.0}}).find("lm loss PPL: 4.851652E+08"),
            std::string::npos);
}

TEST(GptPretrain, ArgumentsRoundTripThroughJson) {
  const auto a = validated(tiny() + Argv{"--bf16", "--split", "90,5,5", "--rotary-percent", "0.5"});
  const recipes::MegatronArgs b = recipes::megatron_args_from_json(recipes::megatron_args_to_json(a));
  EXPECT_EQ(recipes::format_megatron_args(b), recipes::format_megatron_args(a));
  EXPECT_THROW(recipes::megatron_args_from_json("{\"num_layers\": \"six\"}"), ValueError);
}

// A tiny GPT on one fixed batch: the loss goes to (near) zero, as it must if
// the model, the loss mask and the optimizer fit together.
TEST(GptPretrain, TinyModelOverfitsOneBatch) {
  const auto a = validated(tiny() + Argv{"--attention-dropout", "0", "--hidden-dropout", "0", "--lr", "1e-2",
                                         "--weight-decay", "0", "--lr-decay-style", "constant"});
  // Tensors this small gain nothing from threads, which only wait on each other on a busy machine.
  const int threads = num_threads();
  set_num_threads(1);
  manual_seed(7);
  transformer::GPTModel model(recipes::gpt_transformer_config(a, 101));
  optim::MixedPrecisionOptimizer opt(optim::megatron_param_groups(*model), recipes::gpt_optimizer(a),
                                     recipes::gpt_loss_scaler(a), recipes::gpt_mixed_precision_options(a));
  auto samples = std::make_shared<CountingSamples>(2, 16);
  // Tokens 0..16 as ids modulo 97 of sample 0 and 1.
  recipes::GptBatch b = recipes::GptBatchIterator(samples, 0, 2, 0, 1, {}).next();
  b.tokens = from_vector<int64_t>([&] {
    auto v = b.tokens.to_vector<int64_t>();
    for (auto& x : v) x %= 97;
    return v;
  }(), {2, 16});
  b.labels = from_vector<int64_t>([&] {
    auto v = b.labels.to_vector<int64_t>();
    for (auto& x : v) x %= 97;
    return v;
  }(), {2, 16});
  train::StepRunner runner(opt, {}, {.num_microbatches = 1});
  double first = 0, last = 0;
  for (int step = 0; step < 80; ++step) {
    const auto st = runner.step([&](int64_t) {
      Tensor loss = model->forward(b.tokens, b.position_ids, b.labels, b.loss_mask);
      return train::MicroBatchOutput{loss, {{"lm loss", {loss.item<double>(), 1}}}};
    });
    if (step == 0) first = st.loss;
    last = st.loss;
  }
  set_num_threads(threads);
  EXPECT_NEAR(first, std::log(128.0), 0.5);  // about uniform over the padded vocabulary
  EXPECT_LT(last, 0.05) << "first " << first;
}

}  // namespace
}  // namespace qk::test
