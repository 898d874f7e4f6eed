// The distributed optimizer (qk/optim/distributed_optimizer.h) on two forked
// data-parallel ranks, training a tiny GPT with the Trainer for 10 steps:
// equal to the single-rank run (loss per step, final weights) and to two
// ranks with the plain optimizer, with and without overlapped gradient
// reduction and parameter all-gather, f32 and bf16 parameters; optimizer
// state per rank 1/DP of the plain optimizer's (measured from the tensors);
// checkpoints saved sharded at DP=2 load at DP=1 without it (and back) and
// continue on the same curve.
//
// Tolerances. f32: the single rank sums 4 micro-batch gradients in one
// order, two ranks sum 2 and average the pair: losses within 1e-6 relative
// and weights within 1e-6 after 10 AdamW steps at lr 5e-3 (measured: 3e-8
// and 1.2e-7). Two ranks with and without the distributed optimizer reduce
// the same fp32 values; only the gradient norm is summed in another order
// (two shard sums): weights within 1e-7 (measured: identical). bf16
// parameters with fp32 gradient accumulation: a bf16 weight may round the
// other way where the runs' fp32 main weights straddle a rounding boundary,
// so one bf16 unit below magnitude 2 (7.9e-3) and losses within 1e-3
// relative (measured: identical).
#include "qk/optim/distributed_optimizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>

#include "dist/dist_ranks.h"
#include "qccl/ranks.h"
#include "qk/tensor/generator.h"
#include "qk/train/train.h"
#include "qk/transformer/gpt_model.h"
#include "toy.h"

namespace {

using namespace qk;
namespace fs = std::filesystem;

struct Mode {
  bool distributed = true;
  bool shard = true;  // false: the distributed optimizer's buffers without sharding (all-reduce)
  bool overlap_grad = false;
  bool overlap_param = false;
  DType dtype = DType::f32;
  int64_t bucket_size = 3000;  // several buckets on the tiny model, cut across parameters
};

transformer::TransformerConfig tiny_gpt(DType dtype) {
  transformer::TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.seq_length = 16;
  c.vocab_size = 96;
  c.position_embedding_type = transformer::PositionEmbeddingType::rope;
  c.normalization = transformer::Normalization::RMSNorm;
  c.set_swiglu();
  c.add_bias_linear = false;
  c.share_embeddings_and_output_weights = false;
  c.hidden_dropout = c.attention_dropout = 0.0;  // ranks would draw other masks than one rank
  c.params_dtype = dtype;
  return c;
}

// Sample i: its own generator (16 distinct samples, so the model can learn
// them in 10 steps), the same on any rank or resumed run.
train::MicroBatchOutput gpt_step(transformer::GPTModel& model, int64_t first, int64_t n) {
  std::vector<int64_t> toks;
  for (int64_t i = first; i < first + n; ++i) {
    Generator g(7919 * static_cast<uint64_t>(i % 16) + 3);
    const auto v = randint(0, 96, {17}, DType::i64, g).to_vector<int64_t>();
    toks.insert(toks.end(), v.begin(), v.end());
  }
  const Tensor all = from_vector<int64_t>(toks, {n, 17});
  const Tensor tokens = all.narrow(1, 0, 16).contiguous(), labels = all.narrow(1, 1, 16).contiguous();
  Tensor loss = model->forward(tokens, Tensor(), labels);
  return {loss, {{"lm loss", {loss.item<double>(), 1}}}};
}

struct Outcome {
  std::vector<double> losses;  // per iteration
  std::vector<float> weights;  // every parameter, as f32
  optim::OptimizerMemory memory;
  int buckets = 0, launched_in_backward = 0;
};

// Always the 10-iteration schedule; exit_interval stops (and saves) earlier.
struct RunOptions {
  int64_t exit_interval = 0;
  std::string save{}, load{};
  int64_t save_interval = 0;
};

Outcome train_gpt(train::DataParallel dp, const Mode& m, const RunOptions& r = {}) {
  manual_seed(1234);
  transformer::GPTModel model(tiny_gpt(m.dtype));
  const auto groups = optim::megatron_param_groups(*model);
  const auto make = optim::adamw(optim::AdamWOptions(5e-3).betas({0.9, 0.95}));
  const optim::MixedPrecisionOptions mo{.clip_grad = 1.0, .accumulate_allreduce_grads_in_fp32 = m.dtype != DType::f32};
  std::unique_ptr<optim::MixedPrecisionOptimizer> opt;
  optim::DistributedOptimizer* dopt = nullptr;
  if (m.distributed) {
    auto d = std::make_unique<optim::DistributedOptimizer>(
        *model, groups, make, nullptr, mo,
        optim::DistributedOptimizerOptions{.data_parallel_group = dp.group,
                                           .shard = m.shard,
                                           .overlap_grad_reduce = m.overlap_grad,
                                           .overlap_param_gather = m.overlap_param,
                                           .bucket_size = m.bucket_size});
    dopt = d.get();
    if (m.overlap_param) model->set_forward_pre_hook(d->forward_pre_hook());
    opt = std::move(d);
  } else {
    opt = std::make_unique<optim::MixedPrecisionOptimizer>(groups, make, nullptr, mo);
  }
  optim::ParamSchedulerOptions so;
  so.max_lr = 5e-3, so.min_lr = 5e-4, so.lr_decay_style = "cosine", so.start_wd = so.end_wd = 0.1;
  optim::set_schedule_steps(so, {.train_iters = 10, .global_batch_size = 8, .lr_warmup_iters = 2});
  optim::OptimizerParamScheduler sched(&opt->optimizer(), so, opt->group_schedules());
  train::TrainerOptions o;
  o.train_iters = 10;
  o.exit_interval = r.exit_interval;
  o.global_batch_size = 8;
  o.micro_batch_size = 2;
  o.log_interval = 1;
  o.eval_interval = 0;
  o.save = r.save;
  o.load = r.load;
  o.save_interval = r.save_interval;
  train::Trainer trainer(*model, *opt, sched, o, dp);
  trainer.load();
  Outcome out;
  train::TrainerCallbacks cb;
  cb.train_step = [&](int64_t micro) {
    return gpt_step(model, qk_train_test::first_sample(trainer.progress().consumed_train_samples, micro, 2, dp.rank(),
                                                       dp.size()),
                    2);
  };
  cb.on_step = [&](int64_t, const train::StepStats& s) { out.losses.push_back(s.metrics.at("lm loss")); };
  trainer.train(cb);
  for (const Tensor& p : model->parameters()) {
    const auto v = p.to(DType::f32).contiguous().to_vector<float>();
    out.weights.insert(out.weights.end(), v.begin(), v.end());
  }
  out.memory = opt->memory();
  if (dopt) {
    out.buckets = dopt->buffer().last_grad_sync().buckets;
    out.launched_in_backward = dopt->buffer().last_grad_sync().launched_in_backward;
  }
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size(), "sizes ", a.size(), " and ", b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  return worst;
}

void require_same_curve(const Outcome& want, const Outcome& got, double loss_rel, double weight_abs,
                        const std::string& what, size_t first = 0) {
  REQUIRE(got.losses.size() + first == want.losses.size(), what, ": ", got.losses.size(), " iterations");
  double worst_loss = 0;
  for (size_t i = 0; i < got.losses.size(); ++i) {
    const double a = want.losses[i + first], b = got.losses[i];
    worst_loss = std::max(worst_loss, std::fabs(a - b) / std::fabs(a));
    REQUIRE(std::fabs(a - b) <= loss_rel * std::fabs(a), what, ": iteration ", i + first + 1, " loss ", b,
            " vs ", a);
  }
  const double d = max_abs_diff(want.weights, got.weights);
  std::printf("%s: losses within %.2g relative, weights within %.2g\n", what.c_str(), worst_loss, d);
  REQUIRE(d <= weight_abs, what, ": final weights differ by ", d, " (tolerance ", weight_abs, ")");
}

void expect_two_ranks_equal_one(const Mode& m, double loss_rel, double weight_abs, double vs_plain_abs) {
  const auto r = qk_dist_test::on_ranks(2, "distopt-test", [&](const qccl_test::Rank&, dist::ProcessGroup& pg) {
    Mode plain = m;
    plain.distributed = false;
    const Outcome one = train_gpt({}, plain);  // this rank alone, 4 micro-batches per step
    const Outcome two_plain = train_gpt({&pg, nullptr}, plain);
    const Outcome two = train_gpt({&pg, nullptr}, m);
    REQUIRE(one.losses.size() == 10u, "iterations ", one.losses.size());
    REQUIRE(one.losses.back() < one.losses.front() - 0.05, "the model should learn: ", one.losses.front(), " -> ",
            one.losses.back());
    require_same_curve(one, two, loss_rel, weight_abs, "DP=2 distributed vs one rank");
    require_same_curve(two_plain, two, loss_rel, vs_plain_abs, "DP=2 distributed vs DP=2 plain");
    REQUIRE(two.buckets >= 3, "buckets ", two.buckets);
    REQUIRE(two.launched_in_backward == (m.overlap_grad ? two.buckets : 0), "buckets launched during backward: ",
            two.launched_in_backward, " of ", two.buckets);
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(DistributedOptimizer, TwoRanksEqualOneRankF32) { expect_two_ranks_equal_one({}, 1e-6, 1e-6, 1e-7); }

TEST(DistributedOptimizer, TwoRanksEqualOneRankF32OverlappingGradReduce) {
  expect_two_ranks_equal_one({.overlap_grad = true}, 1e-6, 1e-6, 1e-7);
}

TEST(DistributedOptimizer, TwoRanksEqualOneRankF32OverlappingGradReduceAndParamGather) {
  expect_two_ranks_equal_one({.overlap_grad = true, .overlap_param = true}, 1e-6, 1e-6, 1e-7);
}

TEST(DistributedOptimizer, TwoRanksEqualOneRankBf16) {
  expect_two_ranks_equal_one({.dtype = DType::bf16}, 1e-3, 7.9e-3, 7.9e-3);
}

TEST(DistributedOptimizer, TwoRanksEqualOneRankBf16Overlapping) {
  expect_two_ranks_equal_one({.overlap_grad = true, .overlap_param = true, .dtype = DType::bf16}, 1e-3, 7.9e-3,
                             7.9e-3);
}

// --overlap-param-gather: after the step the all-gather is still running;
// the next forward's pre-hooks wait for it part by part (without the hook,
// the next zero_grad does).
TEST(DistributedOptimizer, ParamGatherOverlapsTheNextForward) {
  const auto r = qk_dist_test::on_ranks(2, "distopt-test", [](const qccl_test::Rank&, dist::ProcessGroup& pg) {
    for (bool hook : {true, false}) {
      manual_seed(1234);
      transformer::GPTModel model(tiny_gpt(DType::f32));
      optim::DistributedOptimizer opt(*model, optim::megatron_param_groups(*model),
                                      optim::adamw(optim::AdamWOptions(5e-3)), nullptr, {.clip_grad = 1.0},
                                      {.data_parallel_group = &pg, .overlap_grad_reduce = true,
                                       .overlap_param_gather = true, .bucket_size = 3000});
      int waits = 0;
      if (hook) {
        auto wait = opt.forward_pre_hook();
        model->set_forward_pre_hook([&, wait](const nn::Module& part) {
          ++waits;
          wait(part);
        });
      }
      train::StepRunner runner(opt, {&pg, nullptr}, {.num_microbatches = 2});
      auto step = [&](int64_t micro) { return gpt_step(model, micro * 4 + pg.rank() * 2, 2); };
      runner.step(step);
      REQUIRE(opt.buffer().param_sync_pending(), "the all-gather is left running after the step");
      if (hook) {
        waits = 0;
        runner.step(step);  // the forward waited, bucket by bucket, then the step started the next gather
        REQUIRE(waits == 2 * 5, "pre-hook calls ", waits, " (embedding, 2 layers, final norm, output layer)");
        REQUIRE(opt.buffer().param_sync_pending(), "pending again after the second step");
      } else {
        opt.zero_grad();
        REQUIRE(!opt.buffer().param_sync_pending(), "zero_grad waits when no pre-hook is installed");
      }
      opt.finish_param_sync();
      REQUIRE(!opt.buffer().param_sync_pending(), "finish_param_sync waits for every bucket");
    }
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// An inf/NaN that only one rank's shard sees skips the step on every rank,
// and the gradient norm is the whole model's, the same on each rank and
// equal to the plain optimizer's.
TEST(DistributedOptimizer, InfCheckAndGradNormAreGlobal) {
  const auto r = qk_dist_test::on_ranks(2, "distopt-test", [](const qccl_test::Rank&, dist::ProcessGroup& pg) {
    auto build = [&](bool distributed,
                     transformer::GPTModel& model) -> std::unique_ptr<optim::MixedPrecisionOptimizer> {
      manual_seed(1234);
      model = transformer::GPTModel(tiny_gpt(DType::f32));
      const auto groups = optim::megatron_param_groups(*model);
      const auto make = optim::adamw(optim::AdamWOptions(5e-3));
      if (!distributed)
        return std::make_unique<optim::MixedPrecisionOptimizer>(groups, make, nullptr, optim::MixedPrecisionOptions{});
      return std::make_unique<optim::DistributedOptimizer>(
          *model, groups, make, nullptr, optim::MixedPrecisionOptions{},
          optim::DistributedOptimizerOptions{.data_parallel_group = &pg, .bucket_size = 3000});
    };
    auto step = [&](optim::MixedPrecisionOptimizer& opt, transformer::GPTModel& model, bool poison) {
      opt.zero_grad();
      gpt_step(model, 2 * pg.rank(), 2).loss.backward();
      auto* d = dynamic_cast<optim::DistributedOptimizer*>(&opt);
      if (poison && pg.rank() == 1) {
        // An element rank 0 owns after the reduce-scatter: the first piece of rank 0's shard.
        const auto& b = d->buffer().buckets().front();
        d->buffer().grad_data().data_ptr<float>()[b.offset] = std::numeric_limits<float>::infinity();
      }
      opt.finish_grad_sync(&pg);
      return opt.step();
    };
    transformer::GPTModel plain_model{nullptr}, dist_model{nullptr};
    auto plain = build(false, plain_model);
    auto dist = build(true, dist_model);
    const auto a = step(*plain, plain_model, false), b = step(*dist, dist_model, false);
    REQUIRE(a.updated && b.updated, "clean steps update");
    REQUIRE(std::fabs(a.grad_norm - b.grad_norm) <= 1e-6 * a.grad_norm, "norm ", b.grad_norm, " vs plain ",
            a.grad_norm);
    Tensor norms = from_vector<double>({b.grad_norm}, {1}), both = empty({2}, DType::f64);
    pg.all_gather(both, norms);
    REQUIRE(both.to_vector<double>()[0] == both.to_vector<double>()[1], "the same norm on both ranks");
    const std::vector<float> before = dist_model->parameters().front().to_vector<float>();
    const auto c = step(*dist, dist_model, true);
    REQUIRE(!c.updated && c.found_inf, "rank ", pg.rank(), " must skip: updated ", c.updated);
    dist->finish_param_sync();
    REQUIRE(dist_model->parameters().front().to_vector<float>() == before, "a skipped step changes nothing");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// --overlap-grad-reduce without the distributed optimizer: the same buffers,
// all-reduced buckets, whole state on every rank.
TEST(DistributedOptimizer, UnshardedBuffersWithOverlapEqualOneRank) {
  expect_two_ranks_equal_one({.shard = false, .overlap_grad = true}, 1e-6, 1e-6, 1e-7);
}

// Adam's moments (and bf16's fp32 main weights) per rank: the two ranks'
// shards add up to the plain optimizer's tensors exactly, and each rank
// holds half of them up to a bucket's padding.
TEST(DistributedOptimizer, StatePerRankIsOneOverDpOfThePlainOptimizers) {
  const auto r = qk_dist_test::on_ranks(2, "distopt-test", [](const qccl_test::Rank&, dist::ProcessGroup& pg) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      const Outcome plain = train_gpt({&pg, nullptr}, {.distributed = false, .dtype = dtype}, {.exit_interval = 2});
      const Outcome dist = train_gpt({&pg, nullptr}, {.dtype = dtype}, {.exit_interval = 2});
      Tensor mine = from_vector<int64_t>({dist.memory.optimizer_state, dist.memory.main_params}, {2});
      Tensor both = empty({4}, DType::i64);
      pg.all_gather(both, mine);
      const auto v = both.to_vector<int64_t>();
      REQUIRE(plain.memory.optimizer_state > 0, "the plain optimizer has state after a step");
      REQUIRE(v[0] + v[2] == plain.memory.optimizer_state, "moments: ", v[0], " + ", v[2], " vs ",
              plain.memory.optimizer_state);
      REQUIRE(v[1] + v[3] == plain.memory.main_params, "main params: ", v[1], " + ", v[3], " vs ",
              plain.memory.main_params);
      const int64_t slack = dist.buckets * 128 * 8;  // a bucket's padding, two fp32 moments
      for (int64_t k : {v[0], v[2]})
        REQUIRE(std::llabs(2 * k - plain.memory.optimizer_state) <= 2 * slack, "rank holds ", k, " of ",
                plain.memory.optimizer_state, " bytes of moments");
      REQUIRE(dtype != DType::bf16 || v[1] > 0, "bf16: fp32 main weights per shard");
      REQUIRE(dtype != DType::f32 || v[1] == 0, "f32: the shards are views of the weights");
    }
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("qk_distopt_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Saved sharded at DP=2 at iteration 5, resumed at DP=1 with the plain
// optimizer: iterations 6..10 and the final weights are the uninterrupted
// DP=2 run's; and a plain DP=1 checkpoint resumes sharded at DP=2.
TEST(DistributedOptimizer, CheckpointsMoveBetweenOptimizersAndDataParallelSizes) {
  const fs::path root = scratch("ckpt");
  const auto r = qk_dist_test::on_ranks(2, "distopt-test", [&](const qccl_test::Rank& me, dist::ProcessGroup& pg) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      const std::string tag = dtype == DType::f32 ? "f32" : "bf16";
      const double loss_rel = dtype == DType::f32 ? 1e-6 : 1e-3, weight_abs = dtype == DType::f32 ? 1e-6 : 7.9e-3;
      const Outcome whole = train_gpt({&pg, nullptr}, {.overlap_grad = true, .dtype = dtype});
      const std::string sharded = (root / ("sharded_" + tag)).string();
      train_gpt({&pg, nullptr}, {.overlap_grad = true, .dtype = dtype},
                {.exit_interval = 5, .save = sharded, .save_interval = 5});
      pg.barrier();
      // Each rank resumes alone (its own save folder) without the distributed optimizer.
      const std::string mine = (root / (tag + "_rank" + std::to_string(me.rank))).string();
      const Outcome resumed = train_gpt({}, {.distributed = false, .dtype = dtype},
                                        {.save = mine, .load = sharded, .save_interval = 100});
      require_same_curve(whole, resumed, loss_rel, weight_abs, tag + ": DP=2 sharded -> DP=1 plain", 5);
      // The optimizer file has the plain optimizer's entries.
      const auto a = nn::load_safetensors(sharded + "/iter_0000000005/optim.safetensors");
      const auto b = nn::load_safetensors(mine + "/iter_0000000010/optim.safetensors");
      REQUIRE(a.tensors.size() == b.tensors.size() && a.metadata.size() == b.metadata.size(), "entries ",
              a.tensors.size(), "/", a.metadata.size(), " vs ", b.tensors.size(), "/", b.metadata.size());
      for (const auto& [k, t] : b.tensors) REQUIRE(a.tensors.count(k), "the sharded save lacks ", k);
      pg.barrier();
      // And back: a plain DP=1 checkpoint (each rank writes its own, the same) resumed sharded at DP=2.
      const std::string plain_dir = (root / (tag + "_plain_rank" + std::to_string(me.rank))).string();
      const Outcome one =
          train_gpt({}, {.distributed = false, .dtype = dtype}, {.save = plain_dir, .save_interval = 5});
      const Outcome reloaded = train_gpt({&pg, nullptr}, {.overlap_grad = true, .overlap_param = true, .dtype = dtype},
                                         {.load = plain_dir + "/iter_0000000005"});
      require_same_curve(one, reloaded, loss_rel, weight_abs, tag + ": DP=1 plain -> DP=2 sharded", 5);
      pg.barrier();
    }
  });
  EXPECT_TRUE(r.ok()) << r.summary();
  if (r.ok()) fs::remove_all(root.parent_path());
}

}  // namespace
