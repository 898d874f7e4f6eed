// The GPT split into pipeline stages against the single-rank model on forked
// ranks: initial weights equal by name (global layer indices, the tied copy
// equal to the word embedding), ten Adam steps through the pipeline
// schedules at PP=2, PP=4, PP=2 with two virtual stages (with and without
// overlapped p2p), PP=2 x TP=2 (with and without sequence parallelism) and
// PP=2 x DP=2 give the same loss per step and final weights, forward-only
// evaluation gives the unsplit loss, uneven first/last stages train alike,
// the gradient norm over the stages is the unsplit one, and stage state
// dicts load across layouts.
//
// Tolerances (f32, GPT-2 layout with tied embeddings, Llama layout untied
// with RoPE, RMSNorm, SwiGLU and two query groups; lr 1e-3, 4 micro-batches
// of 2 x 8 tokens per data-parallel rank): a stage runs the unsplit model's
// operations on the same inputs, so without tensor parallelism the forward
// is bit-identical; what differs is the order of sums (the tied embedding's
// gradient added over the embedding group after the micro-batches instead of
// within each, shards under TP, the data-parallel average). Losses agree to
// a relative 1e-5 at every step, final weights to 1e-4 of each tensor's
// largest entry (5e-4 with tensor parallelism; 10 x that for
// linear_qkv.bias: see compare_state), the gradient norm to 1e-5 (the worst
// seen is printed). Measured: the untied Llama layouts without tensor
// parallelism are bit-identical; the others' losses within 3e-8, weights
// within 2e-5 (qkv bias 3e-4), and with TP=2 GPT-2's within 2.3e-4, as at
// PP=1 with TP=2 (tensor parallelism's reduction order, not the pipeline's).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <optional>

#include "parallel/pp_ranks.h"
#include "parallel/tp_ranks.h"
#include "qk/autograd/functions.h"
#include "qk/optim/adam.h"
#include "qk/parallel/pipeline_schedule.h"
#include "qk/parallel/sharding.h"
#include "qk/tensor/generator.h"
#include "qk/transformer/gpt_pipeline.h"

namespace qk::transformer {
namespace {

using parallel::GroupKind;
using parallel::ParallelState;
using qk_tp_test::rel_diff;

constexpr int64_t kMicroBatch = 2, kSeq = 8, kHidden = 32, kMicroBatches = 4;

TransformerConfig tiny_gpt2(int64_t layers = 4) {
  TransformerConfig c;
  c.num_layers = layers;
  c.hidden_size = kHidden;
  c.num_attention_heads = 4;
  c.seq_length = kSeq;
  c.vocab_size = 128;
  c.make_vocab_size_divisible_by = 32;
  c.activation_func = Activation::openai_gelu;
  c.hidden_dropout = 0.0;
  c.attention_dropout = 0.0;
  return c;
}

TransformerConfig tiny_llama(int64_t layers = 4) {
  TransformerConfig c = tiny_gpt2(layers);
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

// Micro-batch `micro` of the global batch of every step (one global batch
// throughout, so ten steps lower the loss).
Batch batch_for(int /*step*/, int64_t micro) {
  Generator g(100 + static_cast<uint64_t>(micro));
  Batch x;
  x.tokens = randint(0, 128, {kMicroBatch, kSeq}, DType::i64, g);
  x.labels = randint(0, 128, {kMicroBatch, kSeq}, DType::i64, g);
  x.loss_mask = ones({kMicroBatch, kSeq});
  x.loss_mask.data_ptr<float>()[3] = 0.0f;
  return x;
}

struct Trained {
  std::vector<double> losses;  // per step: the mean over the global batch's micro-batches
  nn::NamedTensors initial, final;
  double first_grad_norm = 0;
};

// The single-rank run: every micro-batch of the global batch, loss / M.
Trained train_unsplit(const TransformerConfig& c, int steps, int64_t global_micro, bool train = true) {
  manual_seed(1234);
  GPTModel ref(c);
  Trained t;
  for (const auto& item : ref->state_dict()) t.initial.insert(item.key(), item.value().clone());
  optim::Adam opt(ref->parameters(), optim::AdamOptions(1e-3));
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    double total = 0;
    for (int64_t j = 0; j < global_micro; ++j) {
      const Batch b = batch_for(step, j);
      std::optional<NoGradGuard> no_grad;
      if (!train) no_grad.emplace();
      Tensor loss = ref(b.tokens, Tensor(), b.labels, b.loss_mask);
      total += loss.item_double();
      if (train) (loss / static_cast<double>(global_micro)).backward();
    }
    t.losses.push_back(total / static_cast<double>(global_micro));
    if (!train) continue;
    if (step == 0)
      for (const auto& p : ref->parameters()) t.first_grad_norm += sum(square(p.grad().to(DType::f64))).item_double();
    opt.step();
  }
  t.first_grad_norm = std::sqrt(t.first_grad_norm);
  t.final = ref->state_dict();
  return t;
}

struct Layout {
  int pp = 1, tp = 1, dp = 1, vp = 1;
  std::optional<int64_t> first{}, last{};  // --decoder-first/last-pipeline-num-layers
  bool sp = false, overlap = false;
  std::string name() const {
    std::string s = "PP=" + std::to_string(pp);
    if (vp > 1) s += " VPP=" + std::to_string(vp) + (overlap ? " overlap" : "");
    if (tp > 1) s += " TP=" + std::to_string(tp) + (sp ? " SP" : "");
    if (dp > 1) s += " DP=" + std::to_string(dp);
    if (first || last) s += " uneven";
    return s;
  }
  parallel::ParallelSizes sizes() const {
    parallel::ParallelSizes s;
    s.pipeline_model_parallel_size = pp;
    s.tensor_model_parallel_size = tp;
    return s;
  }
};

struct Stage {
  parallel::PipelineLayerSplit split;
  std::vector<GPTModelChunk> chunks;
  std::shared_ptr<dist::ProcessGroup> tp;  // null without tensor parallelism
};

Stage build_stage(const TransformerConfig& base, const Layout& l, ParallelState& ps) {
  TransformerConfig c = base;
  c.tensor_model_parallel_size = l.tp;
  c.sequence_parallel = l.sp;
  parallel::PipelineSplitOptions so;
  so.num_layers = c.num_layers;
  so.pipeline_model_parallel_size = l.pp;
  so.num_virtual_stages_per_pipeline_rank = l.vp > 1 ? l.vp : 0;
  so.decoder_first_pipeline_num_layers = l.first;
  so.decoder_last_pipeline_num_layers = l.last;
  Stage s{parallel::PipelineLayerSplit::make(so), {}, l.tp > 1 ? ps.group(GroupKind::tp) : nullptr};
  manual_seed(1234);
  s.chunks = build_gpt_model_chunks(c, s.split, ps.pipeline_model_parallel_rank(), s.tp);
  return s;
}

parallel::ForwardStepFn forward_step(Stage& s, const int& step, int64_t first_micro) {
  return [&s, &step, first_micro](int chunk, int64_t micro, const Tensor& input) {
    const Batch b = batch_for(step, first_micro + micro);
    GPTModelChunk& ch = s.chunks[static_cast<size_t>(chunk)];
    GPTChunkInput in;
    if (ch->pre_process())
      in.tokens = b.tokens;
    else
      in.hidden = input;
    if (ch->post_process()) {
      in.labels = b.labels;
      in.loss_mask = b.loss_mask;
    }
    Tensor out = ch->forward(in);
    parallel::StepMetrics m;
    if (ch->post_process()) m["lm loss"] = {out.item_double(), 1};
    return parallel::ForwardStepResult{out, m};
  };
}

parallel::PipelineScheduleOptions schedule_options(const Layout& l) {
  parallel::PipelineScheduleOptions o;
  o.num_microbatches = kMicroBatches;
  o.tensor_shape = {kMicroBatch, l.sp ? kSeq / l.tp : kSeq, kHidden};
  o.num_model_chunks = l.vp;
  o.overlap_p2p_comm = l.overlap;
  return o;
}

// The step's mean loss on every rank: the last stage's, averaged over data-parallel ranks.
double step_loss(const parallel::PipelineScheduleResult& r, ParallelState& ps) {
  const parallel::StepMetrics m = parallel::broadcast_from_last_stage(r.metrics, *ps.group(GroupKind::pp));
  Tensor v = from_vector<double>({m.at("lm loss").sum / m.at("lm loss").count}, {1});
  ps.group(GroupKind::dp)->all_reduce(v, dist::ReduceOp::avg);
  return v.data_ptr<double>()[0];
}

// tol: relative to each tensor's largest entry; 10 x tol for linear_qkv's
// bias, whose key part gets only rounding noise as gradient (attention is
// invariant to a bias on the keys), which Adam scales to lr-sized steps.
void compare_state(const nn::NamedTensors& got, const nn::NamedTensors& want, double tol, const std::string& what,
                   double* worst) {
  for (const auto& item : got) {
    REQUIRE(want.contains(item.key()), what, ": unexpected parameter ", item.key());
    const bool key_bias = item.key().ends_with("linear_qkv.bias");
    const double d = rel_diff(item.value(), want[item.key()]) / (key_bias ? 10.0 : 1.0);
    if (worst) *worst = std::max(*worst, d);
    REQUIRE(d <= tol, what, " ", item.key(), ": relative difference ", d, " > ", tol);
  }
}

// One rank's training at layout `l` against the unsplit run.
void train_and_compare(const TransformerConfig& base, const Layout& l, int steps, ParallelState& ps) {
  const int dp_rank = ps.data_parallel_rank();
  const Trained ref = train_unsplit(base, steps, kMicroBatches * l.dp);
  Stage s = build_stage(base, l, ps);
  // Every parameter starts as the unsplit model's; names are global; the stages together hold all of them.
  const nn::NamedTensors mine = stage_state_dict(s.chunks, s.tp.get());
  compare_state(mine, ref.initial, 0.0, l.name() + " initial", nullptr);
  Tensor count = from_vector<double>({static_cast<double>(mine.size())}, {1});
  ps.group(GroupKind::pp)->all_reduce(count);
  REQUIRE(count.data_ptr<double>()[0] == static_cast<double>(ref.initial.size()), l.name(), ": the stages hold ",
          count.data_ptr<double>()[0], " parameters, the model ", ref.initial.size());

  std::vector<Tensor> params;
  for (auto& ch : s.chunks)
    for (const auto& p : ch->parameters()) params.push_back(p);
  optim::Adam opt(params, optim::AdamOptions(1e-3));
  parallel::PipelineSchedule schedule(*ps.group(GroupKind::pp));
  const auto embedding_group = ps.group(GroupKind::embedding);
  int step = 0;
  const parallel::ForwardStepFn fwd = forward_step(s, step, dp_rank * kMicroBatches);
  double worst_loss = 0, worst_weight = 0;
  for (step = 0; step < steps; ++step) {
    opt.zero_grad();
    const parallel::PipelineScheduleResult r = schedule.run(fwd, schedule_options(l));
    all_reduce_embedding_grads(s.chunks, embedding_group.get());
    if (s.tp)
      for (auto& ch : s.chunks) parallel::all_reduce_partial_gradients(*ch, *s.tp);
    if (l.dp > 1)
      for (auto& p : params) ps.group(GroupKind::dp)->all_reduce(p.grad(), dist::ReduceOp::avg);
    if (step == 0) {
      const double norm = pipeline_grad_norm(s.chunks, s.tp.get(), *ps.group(GroupKind::pp));
      REQUIRE(std::abs(norm - ref.first_grad_norm) <= 1e-5 * ref.first_grad_norm, l.name(), ": gradient norm ", norm,
              " vs ", ref.first_grad_norm);
    }
    opt.step();
    const double loss = step_loss(r, ps);
    const double d = std::abs(loss - ref.losses[step]) / std::abs(ref.losses[step]);
    worst_loss = std::max(worst_loss, d);
    REQUIRE(d <= 1e-5, l.name(), " step ", step, ": loss ", loss, " vs ", ref.losses[step]);
  }
  if (steps >= 10)
    REQUIRE(ref.losses.back() < ref.losses.front() - 0.05, "the loss did not go down: ", ref.losses.front(), " -> ",
            ref.losses.back());
  // Tensor parallelism's reductions alone move GPT-2's weights up to 2.3e-4
  // from the unsplit run's after ten steps (the same at PP=1).
  const double weight_tol = l.tp > 1 ? 5e-4 : 1e-4;
  compare_state(stage_state_dict(s.chunks, s.tp.get()), ref.final, weight_tol, l.name() + " final", &worst_weight);
  if (ps.global_rank() == 0)
    std::fprintf(stderr, "%s: worst loss relative difference %.2e, worst weight %.2e\n", l.name().c_str(), worst_loss,
                 worst_weight);
}

void run_layout(const TransformerConfig& c, const Layout& l, int steps, const std::string& token) {
  auto r = qk_pp_test::on_parallel_ranks(l.pp * l.tp * l.dp, token, l.sizes(),
                                         [&](int, ParallelState& ps) { train_and_compare(c, l, steps, ps); });
  EXPECT_TRUE(r.ok()) << l.name() << ": " << r.summary();
}

TEST(GPTPipeline, TwoStagesEqualOneRankOverTenSteps) {
  run_layout(tiny_gpt2(), {.pp = 2}, 10, "gpt-pp2");
  run_layout(tiny_llama(), {.pp = 2}, 10, "llama-pp2");
}

TEST(GPTPipeline, FourStagesEqualOneRankOverTenSteps) { run_layout(tiny_gpt2(), {.pp = 4}, 10, "gpt-pp4"); }

TEST(GPTPipeline, TwoStagesWithTwoVirtualStagesEqualOneRankOverTenSteps) {
  run_layout(tiny_gpt2(), {.pp = 2, .vp = 2}, 10, "gpt-vpp");
  run_layout(tiny_llama(), {.pp = 2, .vp = 2, .overlap = true}, 10, "llama-vpp-overlap");
}

TEST(GPTPipeline, TwoStagesTimesTwoTensorParallelEqualOneRankOverTenSteps) {
  run_layout(tiny_llama(), {.pp = 2, .tp = 2}, 10, "llama-pp2-tp2");
  run_layout(tiny_gpt2(), {.pp = 2, .tp = 2, .sp = true}, 10, "gpt-pp2-tp2-sp");
}

TEST(GPTPipeline, TwoStagesTimesTwoDataParallelEqualOneRankOverTenSteps) {
  run_layout(tiny_gpt2(), {.pp = 2, .dp = 2}, 10, "gpt-pp2-dp2");
}

TEST(GPTPipeline, UnevenFirstAndLastStagesEqualOneRank) {
  run_layout(tiny_llama(), {.pp = 2, .first = 1, .last = 3}, 3, "llama-uneven2");
  run_layout(tiny_gpt2(6), {.pp = 3, .first = 1, .last = 1}, 3, "gpt-uneven3");
}

// Evaluation: forward-only through the stages gives the unsplit model's loss.
TEST(GPTPipeline, ForwardOnlyEqualsTheUnsplitEvaluationLoss) {
  for (const Layout l : {Layout{.pp = 2}, Layout{.pp = 2, .vp = 2}}) {
    auto r = qk_pp_test::on_parallel_ranks(2, "gpt-eval", l.sizes(), [&](int, ParallelState& ps) {
      const Trained ref = train_unsplit(tiny_gpt2(), 1, kMicroBatches, /*train=*/false);
      Stage s = build_stage(tiny_gpt2(), l, ps);
      parallel::PipelineSchedule schedule(*ps.group(GroupKind::pp));
      parallel::PipelineScheduleOptions o = schedule_options(l);
      o.forward_only = true;
      for (auto& ch : s.chunks) ch->eval();
      const int step = 0;
      const double loss = step_loss(schedule.run(forward_step(s, step, 0), o), ps);
      REQUIRE(std::abs(loss - ref.losses[0]) <= 1e-6 * ref.losses[0], l.name(), ": eval loss ", loss, " vs ",
              ref.losses[0]);
      for (auto& ch : s.chunks)
        for (const auto& p : ch->parameters()) REQUIRE(!p.grad().defined(), "forward-only left a gradient");
    });
    EXPECT_TRUE(r.ok()) << l.name() << ": " << r.summary();
  }
}

// Names are global; the last stage's tied copy is the word embedding; a
// state dict saved by one split loads into another.
TEST(GPTPipeline, StageStateDictsAreLayoutIndependent) {
  const Layout l{.pp = 2, .vp = 2};
  auto r = qk_pp_test::on_parallel_ranks(2, "gpt-names", l.sizes(), [&](int rank, ParallelState& ps) {
    Stage s = build_stage(tiny_gpt2(), l, ps);
    const nn::NamedTensors mine = stage_state_dict(s.chunks);
    // 4 layers over 2 stages x 2 chunks: stage 0 holds [0] [2], stage 1 [1] [3].
    const std::vector<std::string> layers = rank == 0 ? std::vector<std::string>{"0", "2"} : std::vector<std::string>{"1", "3"};
    for (const std::string& i : layers)
      REQUIRE(mine.contains("decoder.layers." + i + ".mlp.linear_fc1.weight"), "rank ", rank, " lacks layer ", i);
    REQUIRE(mine.contains("embedding.word_embeddings.weight") == (rank == 0), "embedding on the first stage only");
    REQUIRE(mine.contains("decoder.final_layernorm.weight") == (rank == 1), "final norm on the last stage only");
    REQUIRE(!mine.contains("output_layer.weight"), "the tied copy is not saved");
    REQUIRE(s.chunks[1]->holds_embedding_copy() == (rank == 1), "the last stage holds the copy");
    REQUIRE(shared_embedding_parameter_name(s.chunks) ==
                (rank == 0 ? "embedding.word_embeddings.weight" : "output_layer.weight"),
            "shared parameter name");
    // Another model's weights, loaded from its unsplit state dict, give its loss.
    manual_seed(99);
    GPTModel other(tiny_gpt2());
    load_stage_state_dict(s.chunks, other->state_dict());
    const nn::NamedTensors loaded = stage_state_dict(s.chunks);
    for (const auto& item : loaded) qk_tp_test::require_equal(item.value(), other->state_dict()[item.key()], item.key());
    if (rank == 1)
      qk_tp_test::require_equal(s.chunks[1]->shared_embedding_or_output_weight(),
                                other->state_dict()["embedding.word_embeddings.weight"], "tied copy loaded");
    try {
      nn::NamedTensors partial;
      for (const auto& item : other->state_dict())
        if (item.key() != "decoder.layers.3.mlp.linear_fc2.weight") partial.insert(item.key(), item.value());
      load_stage_state_dict(s.chunks, partial);
      REQUIRE(rank == 0, "a missing layer loaded");
    } catch (const ValueError& e) {
      REQUIRE(std::string(e.what()).find("decoder.layers.3.mlp.linear_fc2.weight") != std::string::npos, e.what());
    }
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(GPTPipeline, ASplitForOtherLayersIsAnError) {
  parallel::PipelineSplitOptions so;
  so.num_layers = 6;
  so.pipeline_model_parallel_size = 2;
  const auto split = parallel::PipelineLayerSplit::make(so);
  EXPECT_THROW(build_gpt_model_chunks(tiny_gpt2(4), split, 0), ValueError);
  TransformerConfig tp2 = tiny_gpt2(6);
  tp2.tensor_model_parallel_size = 2;
  EXPECT_THROW(build_gpt_model_chunks(tp2, split, 0), ValueError);  // no tensor-parallel group given
}

}  // namespace
}  // namespace qk::transformer
