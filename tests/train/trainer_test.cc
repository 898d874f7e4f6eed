// The Trainer in process: Megatron's counters, logging and evaluation
// intervals, the metrics file, train_samples, and the load flags (resume,
// --no-load-optim, --no-load-rng, --finetune).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "common/scratch_dir.h"
#include "qk/base/file_io.h"
#include "qk/tensor/generator.h"
#include "qk/train/train.h"
#include "toy.h"

namespace {

using namespace qk;
namespace fs = std::filesystem;

// build/test_tmp/train_trainer/<pid>, removed at exit when every test passed.
const qk::test::ScratchRoot kScratch("train_trainer");
std::string fresh_dir(const std::string& name) { return kScratch.fresh(name); }

// A model, its optimizer, schedule and Trainer over the toy regression.
struct ToyRun {
  nn::Sequential net;
  std::unique_ptr<optim::MixedPrecisionOptimizer> opt;
  std::unique_ptr<optim::OptimizerParamScheduler> sched;
  std::unique_ptr<train::Trainer> trainer;
  std::vector<train::LogStats> logs;
  std::vector<train::EvalStats> evals;
  std::vector<size_t> metrics_seen;  // records in the metrics file at each on_metrics

  ToyRun(train::TrainerOptions o, uint64_t seed = 3, DType dtype = DType::f32) : net(qk_train_test::make_mlp(seed)) {
    if (dtype != DType::f32) net->to(dtype);
    opt = std::make_unique<optim::MixedPrecisionOptimizer>(
        optim::megatron_param_groups(*net), optim::adamw(optim::AdamWOptions(1e-2)), nullptr,
        optim::MixedPrecisionOptions{.clip_grad = 1.0, .accumulate_allreduce_grads_in_fp32 = true});
    optim::ParamSchedulerOptions so;
    so.max_lr = 1e-2, so.min_lr = 1e-3, so.lr_decay_style = "linear", so.start_wd = so.end_wd = 0.01;
    optim::set_schedule_steps(so, {.train_iters = o.train_iters > 0 ? o.train_iters : o.train_samples / 8,
                                   .global_batch_size = o.global_batch_size, .lr_warmup_iters = 1});
    sched = std::make_unique<optim::OptimizerParamScheduler>(
        &opt->optimizer(), so, std::vector<optim::GroupSchedule>{{.wd_mult = 1}, {.wd_mult = 0}});
    trainer = std::make_unique<train::Trainer>(*net, *opt, *sched, o);
  }

  train::TrainResult train() {
    train::TrainerCallbacks cb;
    cb.train_step = [this](int64_t micro) {
      const int64_t mbs = trainer->options().micro_batch_size;
      return qk_train_test::mse_step(net, trainer->progress().consumed_train_samples + micro * mbs, mbs);
    };
    cb.valid_step = [this](int64_t micro) {
      return qk_train_test::mse_step(net, 500000 + micro * 2, 2);
    };
    cb.on_log = [this](const train::LogStats& s) { logs.push_back(s); };
    cb.on_eval = [this](const train::EvalStats& e) { evals.push_back(e); };
    cb.on_metrics = [this](const train::MetricsLog& log) { metrics_seen.push_back(log.records().size()); };
    return trainer->train(cb);
  }

  std::string weights() const { return bytes_of(net); }
  static std::string bytes_of(const nn::Sequential& net) {
    std::string bytes;
    for (const Tensor& p : net->parameters()) {
      const auto v = p.to(DType::f32).contiguous().to_vector<float>();
      bytes.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    }
    return bytes;
  }
};

train::TrainerOptions options(int64_t iters) {
  train::TrainerOptions o;
  o.train_iters = iters;
  o.global_batch_size = 8;
  o.micro_batch_size = 2;
  o.log_interval = 5;
  o.eval_interval = 5;
  o.eval_iters = 2;
  o.tokens_per_sample = 16;
  return o;
}

TEST(Trainer, CountsLogsEvaluatesAndWritesMetrics) {
  const std::string dir = fresh_dir("logs");
  train::TrainerOptions o = options(10);
  o.metrics_file = dir + "/metrics.jsonl";
  ToyRun run(o);
  EXPECT_EQ(run.trainer->num_microbatches(), 4);
  const auto r = run.train();
  EXPECT_EQ(r.exit_reason, train::ExitReason::finished);
  EXPECT_EQ(r.progress.iteration, 10);
  EXPECT_EQ(r.progress.consumed_train_samples, 80);
  EXPECT_EQ(r.progress.consumed_valid_samples, 2 * 2 * 8);
  ASSERT_EQ(run.logs.size(), 2u);
  EXPECT_EQ(run.logs[0].iteration, 5);
  EXPECT_EQ(run.logs[1].consumed_samples, 80);
  EXPECT_EQ(run.logs[1].train_iters, 10);
  EXPECT_EQ(run.logs[1].global_batch_size, 8);
  EXPECT_EQ(run.logs[1].learning_rate, run.sched->get_lr());
  EXPECT_EQ(run.logs[1].skipped_iterations, 0);
  EXPECT_GT(run.logs[1].grad_norm, 0);
  EXPECT_GT(run.logs[1].elapsed_ms_per_iteration, 0);
  EXPECT_DOUBLE_EQ(run.logs[1].tokens_per_second, run.logs[1].samples_per_second * 16);
  EXPECT_GT(run.logs[1].peak_memory_bytes, 0u);
  EXPECT_LT(run.logs[1].losses.at("loss"), run.logs[0].losses.at("loss"));  // it learns
  ASSERT_EQ(run.evals.size(), 2u);
  EXPECT_EQ(run.evals[1].iteration, 10);
  const auto records = train::MetricsLog::read(o.metrics_file);
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[0].kind, "train");
  EXPECT_EQ(records[0].values.at("learning_rate"), run.logs[0].learning_rate);
  EXPECT_EQ(records[1].kind, "valid");
  EXPECT_EQ(records[1].values.at("loss"), run.evals[0].metrics.at("loss"));
  // No checkpoints: the metrics are handed over once, at the end, all of them.
  EXPECT_EQ(run.metrics_seen, (std::vector<size_t>{4}));
  EXPECT_TRUE(fs::exists(dir + "/metrics.jsonl"));
}

// --train-samples: train_iters = samples / global batch, Megatron's rounding down.
TEST(Trainer, TrainSamplesSetTheIterations) {
  train::TrainerOptions o = options(0);
  o.train_samples = 36;
  ToyRun run(o);
  EXPECT_EQ(run.trainer->train_iters(), 4);
  EXPECT_EQ(run.train().progress.consumed_train_samples, 32);
}

// Stopped by exit_interval and resumed in fresh objects (another init seed):
// the same weights as the uninterrupted run, bit for bit.
TEST(Trainer, ResumeFromExitIntervalIsBitIdentical) {
  ToyRun full(options(9));
  full.train();
  const std::string dir = fresh_dir("resume");
  train::TrainerOptions o = options(9);
  o.save = o.load = dir;
  o.exit_interval = 4;
  ToyRun first(o);
  const auto r1 = first.train();
  EXPECT_EQ(r1.exit_reason, train::ExitReason::exit_interval);
  EXPECT_EQ(r1.progress.iteration, 4);
  ASSERT_TRUE(r1.last_checkpoint.has_value());
  EXPECT_EQ(r1.last_checkpoint->name, "iter_0000000004");
  manual_seed(12345);  // the checkpoint's RNG must win
  o.exit_interval = 0;
  ToyRun second(o, /*seed=*/99);
  ASSERT_TRUE(second.trainer->load().has_value());
  EXPECT_EQ(second.trainer->progress().iteration, 4);
  EXPECT_EQ(second.trainer->progress().consumed_train_samples, 32);
  EXPECT_EQ(second.sched->num_steps(), 32);
  const auto r2 = second.train();
  EXPECT_EQ(r2.progress.iteration, 9);
  EXPECT_TRUE(second.weights() == full.weights());
  EXPECT_EQ(r2.last_checkpoint->name, "iter_0000000009");  // the end of training saves
}

TEST(Trainer, LoadFlagsFollowMegatron) {
  const std::string dir = fresh_dir("flags");
  train::TrainerOptions o = options(4);
  o.save = dir;
  ToyRun saved(o);
  saved.train();
  const std::string saved_weights = saved.weights();
  const Generator& g = default_generator();
  const uint64_t saved_offset = g.offset();

  auto load_with = [&](auto set) {
    train::TrainerOptions lo = options(4);  // another length would change the schedule: refused
    lo.load = dir;
    set(lo);
    auto run = std::make_unique<ToyRun>(lo, 42);
    default_generator().set_state(777, 5);  // after the model's initialisation
    EXPECT_TRUE(run->trainer->load().has_value());
    return run;
  };
  auto has_moments = [](const ToyRun& r) { return !r.opt->optimizer().state_dict().tensors.empty(); };

  auto plain = load_with([](train::TrainerOptions&) {});
  EXPECT_EQ(plain->trainer->progress().iteration, 4);
  EXPECT_EQ(plain->sched->num_steps(), 32);
  EXPECT_TRUE(has_moments(*plain));
  EXPECT_EQ(default_generator().offset(), saved_offset);
  EXPECT_TRUE(plain->weights() == saved_weights);

  auto no_optim = load_with([](train::TrainerOptions& lo) { lo.no_load_optim = true; });
  EXPECT_EQ(no_optim->trainer->progress().iteration, 4);
  EXPECT_EQ(no_optim->sched->num_steps(), 0);  // Megatron warms up again
  EXPECT_FALSE(has_moments(*no_optim));
  EXPECT_TRUE(no_optim->weights() == saved_weights);

  auto no_rng = load_with([](train::TrainerOptions& lo) { lo.no_load_rng = true; });
  EXPECT_EQ(default_generator().seed(), 777u);
  EXPECT_EQ(default_generator().offset(), 5u);
  EXPECT_TRUE(has_moments(*no_rng));

  auto finetune = load_with([](train::TrainerOptions& lo) { lo.finetune = true; });
  EXPECT_EQ(finetune->trainer->progress().iteration, 0);
  EXPECT_EQ(finetune->trainer->progress().consumed_train_samples, 0);
  EXPECT_EQ(finetune->sched->num_steps(), 0);
  EXPECT_FALSE(has_moments(*finetune));
  EXPECT_EQ(default_generator().seed(), 777u);
  EXPECT_TRUE(finetune->weights() == saved_weights);
  EXPECT_EQ(finetune->train().progress.iteration, 4);  // counts from zero
}

// exit_duration_in_mins: checked after every iteration; the run saves and stops.
TEST(Trainer, ExitDurationSavesAndStops) {
  const std::string dir = fresh_dir("duration");
  train::TrainerOptions o = options(20);
  o.save = dir;
  o.exit_duration_in_mins = 1e-9;
  ToyRun run(o);
  const auto r = run.train();
  EXPECT_EQ(r.exit_reason, train::ExitReason::exit_duration);
  EXPECT_EQ(r.progress.iteration, 1);
  ASSERT_TRUE(r.last_checkpoint.has_value());
  EXPECT_EQ(r.last_checkpoint->name, "iter_0000000001");
}

// --no-save-optim leaves the optimizer out; loading it then needs --no-load-optim.
TEST(Trainer, NoSaveOptimNeedsNoLoadOptim) {
  const std::string dir = fresh_dir("no_save_optim");
  train::TrainerOptions o = options(2);
  o.save = dir;
  o.no_save_optim = true;
  ToyRun saved(o);
  saved.train();
  EXPECT_FALSE(fs::exists(dir + "/iter_0000000002/optim.safetensors"));
  train::TrainerOptions lo = options(2);
  lo.load = dir;
  ToyRun strict(lo);
  EXPECT_THROW(strict.trainer->load(), IoError);
  lo.no_load_optim = true;
  ToyRun lenient(lo);
  ASSERT_TRUE(lenient.trainer->load().has_value());
  EXPECT_TRUE(lenient.weights() == saved.weights());
}

// A bf16 model: fp32 main weights and fp32 gradient accumulation; it learns.
TEST(Trainer, Bf16ModelTrains) {
  ToyRun run(options(10), 3, DType::bf16);
  EXPECT_TRUE(run.opt->has_fp32_copies());
  run.train();
  ASSERT_EQ(run.logs.size(), 2u);
  EXPECT_LT(run.logs[1].losses.at("loss"), run.logs[0].losses.at("loss"));
  EXPECT_EQ(run.net->parameters().front().dtype(), DType::bf16);
}

TEST(Trainer, BadOptionsAreClearErrors) {
  train::TrainerOptions o = options(4);
  o.global_batch_size = 7;  // not a multiple of the micro batch (2)
  EXPECT_THROW(ToyRun{o}, ValueError);
  o = options(4);
  o.train_samples = 16;  // both
  EXPECT_THROW(ToyRun{o}, ValueError);
}

}  // namespace

namespace {

std::string file_bytes(const std::string& path) { return read_file(path); }

}  // namespace

// --async-save: the same checkpoints as synchronous saves, byte for byte,
// though training went on while they were written; each is reported once
// it is on disk, the last before train() returns.
TEST(Trainer, AsyncSavesWriteWhatSynchronousSavesWrite) {
  const std::string sync_dir = fresh_dir("sync_saves"), async_dir = fresh_dir("async_saves");
  train::TrainerOptions o = options(9);
  o.save_interval = 3;
  o.save = sync_dir;
  ToyRun sync_run(o);
  const auto r_sync = sync_run.train();
  o.save = async_dir;
  o.async_save = true;
  ToyRun async_run(o);
  std::vector<std::string> reported;
  train::TrainerCallbacks cb;
  cb.train_step = [&](int64_t micro) {
    const int64_t mbs = async_run.trainer->options().micro_batch_size;
    return qk_train_test::mse_step(async_run.net, async_run.trainer->progress().consumed_train_samples + micro * mbs,
                                   mbs);
  };
  cb.on_save = [&](const CheckpointInfo& info) { reported.push_back(info.name); };
  const auto r_async = async_run.trainer->train(cb);
  EXPECT_TRUE(async_run.weights() == sync_run.weights());
  ASSERT_TRUE(r_async.last_checkpoint.has_value());
  EXPECT_EQ(r_async.last_checkpoint->name, r_sync.last_checkpoint->name);
  EXPECT_EQ(reported, (std::vector<std::string>{"iter_0000000003", "iter_0000000006", "iter_0000000009"}));
  for (const char* step : {"iter_0000000003", "iter_0000000006", "iter_0000000009"})
    for (const char* file : {"model.safetensors", "optim.safetensors"}) {
      const std::string a = file_bytes(async_dir + "/" + step + "/" + file);
      EXPECT_FALSE(a.empty()) << step << "/" << file;
      EXPECT_TRUE(a == file_bytes(sync_dir + "/" + step + "/" + file)) << step << "/" << file << " differs";
    }
  EXPECT_EQ(file_bytes(async_dir + "/latest_checkpointed_iteration.txt"), "9\n");
  // It resumes like any checkpoint.
  o.load = async_dir;
  ToyRun resumed(o, /*seed=*/99);
  ASSERT_TRUE(resumed.trainer->load().has_value());
  EXPECT_EQ(resumed.trainer->progress().iteration, 9);
  EXPECT_TRUE(resumed.weights() == sync_run.weights());
}

// The snapshot is taken when save() is called: a step right after it cannot
// change what is written; a failed write is an error of the next call.
TEST(AsyncCheckpointSaver, WritesTheSnapshotNotTheLaterStateAndReportsFailures) {
  const std::string dir = fresh_dir("async_saver");
  nn::Sequential net = qk_train_test::make_mlp(5);
  const train::TrainState st{net.get(), nullptr, nullptr};
  train::CheckpointMeta m;
  m.progress.iteration = 1;
  const std::string before = ToyRun::bytes_of(net);
  {
    train::AsyncCheckpointSaver saver(CheckpointDir(dir, 2));
    train::CheckpointSnapshot snap = train::snapshot_train_state(st, m);
    for (Tensor p : net->parameters()) p.fill_(3.0);  // "the next step", before the write even starts
    EXPECT_FALSE(saver.save("step-1", std::move(snap)).has_value());
    for (Tensor p : net->parameters()) p.fill_(4.0);  // and while it writes
      const auto done = saver.wait();
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->name, "step-1");
    EXPECT_FALSE(saver.in_flight());
    EXPECT_FALSE(saver.wait().has_value());  // nothing in flight
  }
  nn::Sequential loaded = qk_train_test::make_mlp(6);
  const auto found = train::find_checkpoint(dir);
  ASSERT_TRUE(found.has_value());
  train::load_train_state(found->path + "/", found->meta, found->path, {loaded.get(), nullptr, nullptr}, {});
  EXPECT_TRUE(ToyRun::bytes_of(loaded) == before);

  // A folder that cannot be written: the next wait() says so.
  const std::string blocked = dir + "/a_file";
  atomic_write_file(blocked, "not a folder\n");
  train::AsyncCheckpointSaver failing(CheckpointDir(blocked + "/ckpt", 1));
  failing.save("step-1", train::snapshot_train_state(st, m));
  EXPECT_THROW(failing.wait(), Error);
  EXPECT_FALSE(failing.in_flight());
}
