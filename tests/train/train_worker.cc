// A small Trainer run in its own process, for the exit tests: the toy MLP
// regression of toy.h, AdamW, a cosine schedule, checkpoints in --save.
//
//   qk_train_worker --save DIR --load DIR --iters 12 [--exit-interval K]
//       [--exit-signal-handler] [--sleep-ms MS] [--weights-out FILE]
//
// Prints "iteration I/N loss L" per iteration, "exit_reason R iteration I"
// at the end, and writes the final weights to --weights-out.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "qk/nn/serialize.h"
#include "qk/train/train.h"
#include "toy.h"

namespace {

struct Args {
  std::string save, load, weights_out;
  int64_t iters = 12, exit_interval = 0, save_interval = 0, sleep_ms = 0;
  bool exit_signal_handler = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--save") a.save = value();
    else if (k == "--load") a.load = value();
    else if (k == "--weights-out") a.weights_out = value();
    else if (k == "--iters") a.iters = std::stoll(value());
    else if (k == "--exit-interval") a.exit_interval = std::stoll(value());
    else if (k == "--save-interval") a.save_interval = std::stoll(value());
    else if (k == "--sleep-ms") a.sleep_ms = std::stoll(value());
    else if (k == "--exit-signal-handler") a.exit_signal_handler = true;
    else {
      std::fprintf(stderr, "unknown argument %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

int run(const Args& a) {
  using namespace qk;
  auto net = qk_train_test::make_mlp(3);
  optim::MixedPrecisionOptimizer opt(optim::megatron_param_groups(*net),
                                     optim::adamw(optim::AdamWOptions(1e-2).weight_decay(0.01)), nullptr,
                                     {.clip_grad = 1.0});
  optim::ParamSchedulerOptions so;
  so.max_lr = 1e-2, so.min_lr = 1e-3, so.lr_decay_style = "cosine", so.start_wd = so.end_wd = 0.01;
  optim::set_schedule_steps(so, {.train_iters = a.iters, .global_batch_size = 8, .lr_warmup_iters = 2});
  optim::OptimizerParamScheduler sched(&opt.optimizer(), so, opt.group_schedules());
  train::TrainerOptions o;
  o.train_iters = a.iters;
  o.global_batch_size = 8;
  o.micro_batch_size = 2;
  o.log_interval = 1;
  o.eval_interval = 4;
  o.eval_iters = 1;
  o.save = a.save;
  o.load = a.load;
  o.save_interval = a.save_interval;
  o.exit_interval = a.exit_interval;
  o.exit_signal_handler = a.exit_signal_handler;
  if (!a.save.empty()) o.metrics_file = a.save + "/metrics.jsonl";
  train::Trainer trainer(*net, opt, sched, o);
  if (auto c = trainer.load()) std::printf("loaded %s at iteration %lld\n", c->where.c_str(),
                                           static_cast<long long>(trainer.progress().iteration));
  train::TrainerCallbacks cb;
  cb.train_step = [&](int64_t micro) {
    if (micro == 0 && a.sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.sleep_ms));
    return qk_train_test::mse_step(net, trainer.progress().consumed_train_samples + micro * 2, 2);
  };
  cb.valid_step = [&](int64_t micro) {
    return qk_train_test::mse_step(net, 1000000 + trainer.progress().consumed_valid_samples + micro * 2, 2);
  };
  cb.on_log = [](const train::LogStats& s) {
    std::printf("iteration %lld/%lld loss %.6f lr %.6g\n", static_cast<long long>(s.iteration),
                static_cast<long long>(s.train_iters), s.losses.at("loss"), s.learning_rate);
    std::fflush(stdout);
  };
  const train::TrainResult r = trainer.train(cb);
  std::printf("exit_reason %s iteration %lld\n", train::exit_reason_name(r.exit_reason),
              static_cast<long long>(r.progress.iteration));
  if (!a.weights_out.empty()) nn::save(*net, a.weights_out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qk_train_worker: %s\n", e.what());
    return 1;
  }
}
