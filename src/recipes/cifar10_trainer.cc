// `qk train cifar10`'s epochs on the training-loop library: one StepRunner
// step per batch, checkpoints through qk/train/checkpoint.h with the epoch
// bookkeeping as their user state, and the older v1 format still read.
#include "qk/recipes/cifar10_trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "qk/autograd/functions.h"
#include "qk/base/checkpoint_dir.h"
#include "qk/base/error.h"
#include "qk/base/fault.h"
#include "qk/base/file_io.h"
#include "qk/base/log.h"
#include "qk/base/thread_pool.h"
#include "qk/base/timer.h"
#include "qk/data/dataset.h"
#include "qk/data/loader.h"
#include "qk/dist/ddp.h"
#include "qk/dist/launch_env.h"
#include "qk/dist/process_group.h"
#include "qk/dist/sync_batchnorm.h"
#include "qk/models/cifar10.h"
#include "qk/nn/safetensors.h"
#include "qk/optim/optimizer.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"
#include "qk/train/async_checkpoint.h"
#include "qk/train/checkpoint.h"
#include "qk/optim/mixed_precision_optimizer.h"
#include "qk/plot/plot.h"
#include "qk/train/step_runner.h"

namespace qk::recipes {
namespace {

using nlohmann::json;

constexpr const char* kFormatV1 = "qk-cifar10-checkpoint-v1";  // before qk/train: optim::save by index
constexpr const char* kFormatV2 = "qk-cifar10-checkpoint-v2";  // qk/train checkpoint, CIFAR state as "user"

// How the steps run: mixed precision and, under qk run, data parallelism.
struct Runtime {
  bool amp = false;
  DType amp_dtype = DType::bf16;
  int rank = 0, world = 1;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  double comm_wait_ms = 0;  // this epoch: waiting for gradients after backward
  int64_t steps = 0, skipped = 0;
  // --cuda-graph: the step's inputs on the device, the same tensors every
  // step (what the recorded forward reads); made at the first full batch.
  bool cuda_graph = false;
  Tensor graph_images, graph_labels;
  bool lead() const { return rank == 0; }
};

// What a checkpoint records besides the weights and optimizer files.
struct History {
  plot::TrainingCurves curves;
  std::vector<double> epoch_seconds;
  double best_val_acc = -1;
  int best_epoch = 0;
};

// Where training stands: a checkpoint taken inside an epoch resumes there.
struct Progress {
  int epoch = 0;             // epochs finished
  int64_t batch = 0;         // batches of the next epoch done
  int64_t global_step = 0;   // optimizer steps since the start of training
  // The unfinished epoch's sums (over every rank) and its time so far.
  double loss_sum = 0;
  int64_t correct = 0, seen = 0;
  double elapsed_s = 0;
};

optim::OptimizerFactory optimizer_factory(const TrainCifarOptions& o) {
  if (o.optimizer == "adam") return optim::adam(optim::AdamOptions(o.lr).weight_decay(o.weight_decay));
  if (o.optimizer == "sgd")
    return optim::sgd(optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  QK_THROW(ValueError, "Unknown --optimizer '", o.optimizer, "'; expected adam or sgd");
}

// fp16 autocast keeps fp32 weights and scales the loss as torch's GradScaler
// does: no hysteresis, growth every 2000 clean steps, no lower bound.
std::unique_ptr<optim::LossScaler> make_scaler(const TrainCifarOptions& o) {
  if (o.amp != "fp16") return nullptr;
  return std::make_unique<optim::DynamicLossScaler>(optim::torch_grad_scaler_options());
}

json args_json(const TrainCifarOptions& o) {
  return {{"model", o.model},       {"epochs", o.epochs},     {"batch_size", o.batch_size},
          {"global_batch_size", o.global_batch_size},       {"lr", o.lr},
          {"optimizer", o.optimizer}, {"momentum", o.momentum}, {"weight_decay", o.weight_decay},
          {"augment", o.augment},   {"seed", o.seed},         {"amp", o.amp}};
}

// The epoch bookkeeping: the checkpoint's user state (v2) or its top level (v1).
json cifar_state(const models::CifarModel& m, const TrainCifarOptions& o, uint64_t data_seed, const History& h,
                 const Progress& p) {
  json j;
  j["model"] = m.name;
  j["epoch"] = p.epoch;  // epochs finished; a resumed run starts at epoch + 1 (1-based)
  j["epochs"] = o.epochs;
  j["batch_in_epoch"] = p.batch;
  j["global_step"] = p.global_step;
  j["partial_epoch"] = {{"loss_sum", p.loss_sum}, {"correct", p.correct}, {"seen", p.seen},
                        {"seconds", p.elapsed_s}};
  j["optimizer"] = o.optimizer;
  j["data_seed"] = data_seed;
  j["metrics"] = {{"train_loss", h.curves.train_loss}, {"train_acc", h.curves.train_acc},
                  {"val_loss", h.curves.val_loss},     {"val_acc", h.curves.val_acc},
                  {"epoch_seconds", h.epoch_seconds}};
  j["best_val_acc"] = h.best_val_acc;
  j["best_epoch"] = h.best_epoch;
  j["amp"] = o.amp;
  return j;
}

train::CheckpointMeta checkpoint_meta(const models::CifarModel& m, const TrainCifarOptions& o, uint64_t data_seed,
                                      const History& h, const Progress& p) {
  train::CheckpointMeta meta;
  meta.format = kFormatV2;
  meta.progress.iteration = p.global_step;
  const Generator& g = default_generator();  // rank 0's, which every rank restores
  meta.rng = {{g.seed(), g.offset()}};
  meta.args_json = args_json(o).dump();
  meta.user_json = cifar_state(m, o, data_seed, h, p).dump();
  meta.weights_metadata = {{"model", m.name}, {"epoch", std::to_string(p.epoch)}};
  return meta;
}

// Writes DIR/TAG.safetensors, DIR/TAG.optim.safetensors, then DIR/TAG.json
// (latest.* and best.*, for people and `qk infer`; an epoch's end only).
void save_tagged(const std::string& dir, const std::string& tag, const models::CifarModel& m,
                 optim::MixedPrecisionOptimizer& opt, const TrainCifarOptions& o, uint64_t data_seed,
                 const History& h, const Progress& p) {
  train::CheckpointMeta meta = checkpoint_meta(m, o, data_seed, h, p);
  meta.weights_file = tag + ".safetensors";
  meta.optimizer_file = tag + ".optim.safetensors";
  const std::string state = train::write_train_state(dir + "/", {m.module.get(), &opt, nullptr}, meta);
  atomic_write_file(dir + "/" + tag + ".json", state + "\n");
}

// The resumable checkpoint: CKPT/step-NNNNNNNNNN/ with a checksummed manifest,
// written atomically; the newest keep_last stay.
// With `saver` (--async-save) a host snapshot is written in the background
// and the path is that of the earlier save it waited for ("" when none).
std::string save_step_checkpoint(const CheckpointDir& ckpts, const models::CifarModel& m,
                                 optim::MixedPrecisionOptimizer& opt, const TrainCifarOptions& o, uint64_t data_seed,
                                 const History& h, const Progress& p, train::AsyncCheckpointSaver* saver) {
  const std::string name = fmt::format("step-{:010d}", p.global_step);
  const train::TrainState st{m.module.get(), &opt, nullptr};
  if (!saver) return train::save_checkpoint(ckpts, name, st, checkpoint_meta(m, o, data_seed, h, p)).path;
  const auto earlier = saver->save(name, train::snapshot_train_state(st, checkpoint_meta(m, o, data_seed, h, p)));
  return earlier ? earlier->path : "";
}

// Restores model, optimizer, RNG, loss scaler and history from a
// checkpoint's JSON (`where` names it in errors; file names in it are
// relative to `dir`); returns where training stands.
Progress restore(const json& j, const std::string& dir, const std::string& where, const models::CifarModel& m,
                 optim::MixedPrecisionOptimizer& opt, const TrainCifarOptions& o, uint64_t& data_seed, History& h) {
  try {
    const std::string format = j.at("format").get<std::string>();
    QK_CHECK_AS(IoError, format == kFormatV1 || format == kFormatV2, "Checkpoint '", where, "' has format '",
                format, "', not ", kFormatV2, " or ", kFormatV1);
    const bool v1 = format == kFormatV1;
    const json& s = v1 ? j : j.at("user");
    const std::string model = s.at("model").get<std::string>();
    QK_CHECK_AS(ValueError, model == m.name, "Checkpoint '", where, "' was trained with --model ", model,
                ", not --model ", m.name, "; pass --model ", model);
    const std::string optimizer = s.at("optimizer").get<std::string>();
    QK_CHECK_AS(ValueError, optimizer == o.optimizer, "Checkpoint '", where, "' was trained with --optimizer ",
                optimizer, ", not ", o.optimizer);
    const std::string weights = dir + j.at("weights").get<std::string>();
    models::load_cifar_weights(m, weights);
    const auto meta = nn::load_safetensors(weights).metadata;
    Progress p;
    p.epoch = s.at("epoch").get<int>();
    QK_CHECK_AS(IoError, meta.count("epoch") && meta.at("epoch") == std::to_string(p.epoch), "Checkpoint '",
                weights, "' does not hold epoch ", p.epoch, " that '", where,
                "' names (interrupted while saving?); resume from another checkpoint or start again");
    // Checkpoints from before mid-epoch resume finished whole epochs.
    p.batch = s.value("batch_in_epoch", int64_t{0});
    p.global_step = s.value("global_step", int64_t{-1});
    if (s.contains("partial_epoch")) {
      const json& pe = s.at("partial_epoch");
      p.loss_sum = pe.at("loss_sum").get<double>();
      p.correct = pe.at("correct").get<int64_t>();
      p.seen = pe.at("seen").get<int64_t>();
      p.elapsed_s = pe.at("seconds").get<double>();
    }
    if (v1) {
      // The optimizer state by index over the model's parameters, which an
      // fp32 model's MixedPrecisionOptimizer steps in the same order.
      optim::load(opt.optimizer(), dir + j.at("optimizer_state").get<std::string>());
      default_generator().set_state(j.at("rng").at("seed").get<uint64_t>(), j.at("rng").at("offset").get<uint64_t>());
      if (optim::LossScaler* scaler = opt.scaler(); scaler && j.contains("grad_scaler"))
        scaler->load_state_dict(j.at("grad_scaler").get<std::map<std::string, double>>());
    } else {
      train::load_train_state(dir, j.dump(), where, {m.module.get(), &opt, nullptr}, {.load_model = false});
    }
    data_seed = s.at("data_seed").get<uint64_t>();
    const json& mt = s.at("metrics");
    h.curves.train_loss = mt.at("train_loss").get<std::vector<double>>();
    h.curves.train_acc = mt.at("train_acc").get<std::vector<double>>();
    h.curves.val_loss = mt.at("val_loss").get<std::vector<double>>();
    h.curves.val_acc = mt.at("val_acc").get<std::vector<double>>();
    h.epoch_seconds = mt.at("epoch_seconds").get<std::vector<double>>();
    h.best_val_acc = s.at("best_val_acc").get<double>();
    h.best_epoch = s.at("best_epoch").get<int>();
    QK_CHECK_AS(IoError, p.epoch >= 0 && h.curves.val_acc.size() == static_cast<size_t>(p.epoch),
                "Checkpoint '", where, "' is inconsistent: epoch ", p.epoch, " but ", h.curves.val_acc.size(),
                " epochs of metrics");
    QK_CHECK_AS(IoError, p.batch >= 0 && p.seen >= 0, "Checkpoint '", where, "' is inconsistent: batch ", p.batch,
                ", seen ", p.seen);
    return p;
  } catch (const json::exception& e) {
    QK_THROW(IoError, "Cannot read checkpoint '", where, "': ", e.what(),
             "; it should be written by `qk train cifar10` (a checkpoints/step-* folder or a .json sidecar)");
  }
}

// What --resume points at: the newest valid OUT/checkpoints/step-* folder
// ("auto"; else the older latest.json sidecar), a checkpoint folder, a
// sidecar .json or the .safetensors next to one. Empty `where`: nothing to
// resume ("auto" on a fresh run).
struct ResumeSource {
  std::string where, dir;
  json state;
};

ResumeSource find_resume(const TrainCifarOptions& o, const CheckpointDir& ckpts) {
  ResumeSource r;
  auto from_sidecar = [&r](const std::string& path) {
    r.where = path;
    const size_t slash = path.find_last_of('/');
    r.dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
    try {
      r.state = json::parse(read_file(path));
    } catch (const json::exception& e) {
      QK_THROW(IoError, "Cannot read checkpoint sidecar '", path, "': ", e.what(),
               "; it should be the JSON `qk train cifar10` writes next to the weights");
    }
  };
  auto from_folder = [&r](const CheckpointInfo& c) {
    r.where = c.path;
    r.dir = c.path + "/";
    r.state = json::parse(c.meta);
  };
  if (o.resume == "auto") {
    if (auto c = ckpts.latest_valid()) {
      from_folder(*c);
    } else if (file_exists(ckpts.root() + "/latest.json")) {
      from_sidecar(ckpts.root() + "/latest.json");
    }
    return r;
  }
  if (file_exists(o.resume + "/manifest.json")) {
    from_folder(*train::find_checkpoint(o.resume));
    return r;
  }
  const std::string ext = ".safetensors";
  if (o.resume.size() > ext.size() && o.resume.ends_with(ext)) {
    from_sidecar(o.resume.substr(0, o.resume.size() - ext.size()) + ".json");
  } else {
    from_sidecar(o.resume);
  }
  return r;
}

// An epoch's running sums on this rank.
struct EpochSums {
  double loss_sum = 0;
  int64_t correct = 0, seen = 0;
};

// The sums over every rank (a collective: every rank calls it at the same step).
EpochSums all_ranks(const EpochSums& local, const Runtime& rt) {
  if (rt.world == 1) return local;
  Tensor v = from_vector<double>(
      {local.loss_sum, static_cast<double>(local.correct), static_cast<double>(local.seen)}, {3});
  dist::group().all_reduce(v);
  const double* d = v.data_ptr<double>();
  return {d[0], static_cast<int64_t>(d[1]), static_cast<int64_t>(d[2])};
}

// One pass over the training set from the loader's start batch on, adding to
// `sums`; after every optimizer step, ++global_step and after_step(batches
// done in this epoch, sums) (checkpoints). Returns the sums over every rank.
EpochSums train_epoch(const models::CifarModel& m, train::StepRunner& runner, data::DataLoader& loader, Runtime& rt,
                      EpochSums sums, int64_t& global_step, int epoch, int epochs, bool bar,
                      const std::function<void(int64_t, const EpochSums&)>& after_step) {
  m.module->train();
  const Device dev = models::model_device(m);
  const int64_t nb = loader.num_batches();
  const Timer t;
  double last_bar = -1;
  int64_t seen_here = 0;
  rt.comm_wait_ms = 0;
  rt.steps = 0;
  for (const data::Batch& b : loader) {
    // Each batch to the model's device. The loss and the count of right
    // answers stay there: the step reads both back at once with the
    // optimizer's one read (a copy of the logits would stall every step).
    const int64_t n = b.labels.numel();
    auto output = [&m, n](const Tensor& images, const Tensor& labels) {
      const Tensor logits = m.forward(images);
      const Tensor loss = cross_entropy(logits, labels);
      const Tensor right = ops::sum(ops::cast(ops::binary(BinaryOp::eq, ops::argmax(logits.detach(), 1), labels),
                                              DType::f64));
      return train::MicroBatchOutput{loss, {{"loss", {0.0, 1.0, loss}}, {"correct", {0.0, double(n), right}}}};
    };
    // The recorded step's inputs are made from a full batch (a run resumed at
    // an epoch's short last batch must not fix the graph's shape to it).
    if (rt.cuda_graph && !rt.graph_images.defined() && n == loader.options().batch_size) {
      rt.graph_images = empty(b.images.shape(), TensorOptions().dtype(b.images.dtype()).device(dev));
      rt.graph_labels = empty(b.labels.shape(), TensorOptions().dtype(b.labels.dtype()).device(dev));
    }
    train::StepStats st;
    if (rt.cuda_graph && rt.graph_images.defined() && b.images.shape() == rt.graph_images.shape()) {
      // The recorded step reads the same tensors every time: the batch goes into them.
      train::GraphedForwardStep g;
      g.device = dev;
      g.load = [&](int64_t) {
        ops::copy_(rt.graph_images, b.images);
        ops::copy_(rt.graph_labels, b.labels);
        return std::map<std::string, train::Metric>{};
      };
      g.forward = [&](int64_t) { return output(rt.graph_images, rt.graph_labels); };
      st = runner.step(g);
    } else {
      // Without graphs, or a last batch of another size: an eager step.
      const Tensor images = dev.is_cpu() ? b.images : b.images.to(dev);
      const Tensor labels = dev.is_cpu() ? b.labels : b.labels.to(dev);
      st = runner.step([&](int64_t) { return output(images, labels); });
    }
    rt.comm_wait_ms += st.comm_wait_ms;
    rt.skipped += st.skipped;
    ++rt.steps;
    ++global_step;
    sums.loss_sum += st.loss * static_cast<double>(n);
    sums.correct += std::llround(st.metrics.at("correct") * static_cast<double>(n));
    sums.seen += n;
    seen_here += n;
    after_step(b.index + 1, sums);
    if (bar && (t.seconds() - last_bar > 0.25 || b.index + 1 == nb)) {
      last_bar = t.seconds();
      const int width = 30, done = static_cast<int>(width * (b.index + 1) / nb);
      fmt::print("\rEpoch {}/{} [{}{}] {}/{} loss {:.4f} acc {:.2f}% {:.0f} img/s ", epoch + 1, epochs,
                 std::string(done, '='), std::string(width - done, ' '), b.index + 1, nb,
                 sums.loss_sum / static_cast<double>(std::max<int64_t>(sums.seen, 1)),
                 100.0 * sums.correct / std::max<int64_t>(sums.seen, 1), rt.world * seen_here / t.seconds());
      std::fflush(stdout);
    }
  }
  if (bar) fmt::print("\r{}\r", std::string(110, ' '));
  const EpochSums all = all_ranks(sums, rt);
  QK_CHECK(all.seen > 0, "The training set is empty");
  return all;
}

Device training_device(const TrainCifarOptions& o);

void check_options(const TrainCifarOptions& o) {
  QK_CHECK_AS(ValueError, o.epochs >= 1 && o.epochs <= 100000, "--epochs must be 1..100000, got ", o.epochs);
  QK_CHECK_AS(ValueError, o.batch_size >= 1 && o.batch_size <= 65536, "--batch-size must be 1..65536, got ",
              o.batch_size);
  QK_CHECK_AS(ValueError, o.lr > 0 && o.lr < 100, "--lr must be in (0, 100), got ", o.lr);
  QK_CHECK_AS(ValueError, o.weight_decay >= 0, "--weight-decay must be >= 0, got ", o.weight_decay);
  QK_CHECK_AS(ValueError, o.amp == "off" || o.amp == "bf16" || o.amp == "fp16",
              "--amp must be off, bf16 or fp16, got '", o.amp, "'");
  QK_CHECK_AS(ValueError, o.grad_compress == "none" || o.grad_compress == "bf16" || o.grad_compress == "fp16",
              "--grad-compress must be none, bf16 or fp16, got '", o.grad_compress, "'");
  (void)training_device(o);
}

// --device, checked (usable_device): without an index, the local rank's.
Device training_device(const TrainCifarOptions& o) {
  return models::usable_device(o.device, dist::launch_env().local_rank);
}

// The default group, when this run made it, ends with the run (declared
// before the DDP that uses it), so a program can train more than once.
struct GroupOfThisRun {
  bool made = false;
  GroupOfThisRun() = default;
  GroupOfThisRun(const GroupOfThisRun&) = delete;
  GroupOfThisRun& operator=(const GroupOfThisRun&) = delete;
  ~GroupOfThisRun() {
    if (made) dist::destroy();
  }
};

}  // namespace

struct Cifar10Training::State {
  TrainCifarOptions o;
  int done = 0;  // stages run: 1 initialize, 2 model and optimizer, 3 data loader, 4 train, 5 finish
  Timer total;
  GroupOfThisRun group_of_this_run;  // before rt, whose DDP uses the group
  Runtime rt;
  int64_t batch_size = 0;  // per rank
  std::optional<data::Cifar10> data;
  models::CifarModel m;
  std::unique_ptr<optim::MixedPrecisionOptimizer> opt;
  uint64_t data_seed = 0;
  History h;
  Progress start;
  std::string ckpt_dir;
  std::optional<CheckpointDir> ckpts;
  std::unique_ptr<train::AsyncCheckpointSaver> saver;  // --async-save, rank 0
  int sync_bn_layers = 0;
  std::unique_ptr<train::StepRunner> runner;
  std::unique_ptr<data::DataLoader> loader;
  int64_t nb = 0;  // batches per epoch
  bool bar = false;
  int64_t global_step = 0;
  int epochs_done = 0;
};

Cifar10Training::Cifar10Training(TrainCifarOptions o) : s_(std::make_unique<State>()) { s_->o = std::move(o); }

Cifar10Training::~Cifar10Training() = default;

void Cifar10Training::require(int stage, const char* caller) const {
  static const char* const kStages[] = {"the constructor", "initialize()", "setup_model_and_optimizer()",
                                        "build_data_loader()", "train()", "finish()"};
  QK_CHECK(s_->done >= stage, "Cifar10Training::", caller, " needs ", kStages[stage], " first");
  QK_CHECK(s_->done == stage, "Cifar10Training::", caller, ": already run");
}

nn::Module& Cifar10Training::model() {
  QK_CHECK(s_->done >= 2, "Cifar10Training::model needs setup_model_and_optimizer() first");
  return *s_->m.module;
}

optim::MixedPrecisionOptimizer& Cifar10Training::optimizer() {
  QK_CHECK(s_->done >= 2, "Cifar10Training::optimizer needs setup_model_and_optimizer() first");
  return *s_->opt;
}

int Cifar10Training::epochs_done() const { return s_->epochs_done; }
double Cifar10Training::best_val_acc() const { return s_->h.best_val_acc; }

void Cifar10Training::initialize() {
  require(0, "initialize");
  State& s = *s_;
  const TrainCifarOptions& o = s.o;
  check_options(o);
  if (o.threads > 0) set_num_threads(o.threads);
  s.total = Timer();
  if (dist::launch_env().world_size > 1) {
    if (!dist::is_initialized()) {
      dist::init();
      s.group_of_this_run.made = true;
    }
    s.rt.rank = dist::rank();
    s.rt.world = dist::world_size();
  }
  s.batch_size = o.batch_size;
  if (o.global_batch_size > 0) {
    QK_CHECK_AS(WorldSizeError, o.global_batch_size % s.rt.world == 0, "--global-batch-size ", o.global_batch_size,
                " is not divisible by the ", s.rt.world, " ranks of this job: use a multiple of ", s.rt.world,
                " (each rank takes global / ranks images per step)");
    s.batch_size = o.global_batch_size / s.rt.world;
  }
  s.rt.amp = o.amp != "off";
  s.rt.amp_dtype = o.amp == "fp16" ? DType::f16 : DType::bf16;
  if (o.cuda_graph) {
    QK_CHECK_AS(ValueError, s.rt.world == 1, "--cuda-graph runs one rank: DDP's all-reduce between the ",
                s.rt.world, " ranks is host-driven and cannot be recorded in a graph; run without it under qk run");
    QK_CHECK_DEVICE(!training_device(o).is_cpu(), "--cuda-graph records each step as a CUDA graph: it needs a GPU "
                    "(--device cuda), not ", o.device);
    s.rt.cuda_graph = true;
  }
  // Rank 0 writes the synthetic set when there is none; the others read it after.
  if (s.rt.lead()) s.data.emplace(models::open_cifar10(o.data_dir, true, o.synth_train, o.synth_test, 0));
  if (s.rt.world > 1) dist::group().barrier();
  if (!s.rt.lead()) s.data.emplace(models::open_cifar10(o.data_dir, false, o.synth_train, o.synth_test, 0));
  s.done = 1;
}

void Cifar10Training::setup_model_and_optimizer() {
  require(1, "setup_model_and_optimizer");
  State& s = *s_;
  const TrainCifarOptions& o = s.o;
  const bool lead = s.rt.lead();
  manual_seed(o.seed);
  s.m = models::make_cifar_model(o.model);
  if (o.channels_last) models::use_channels_last(s.m);
  const Device dev = training_device(o);
  if (!dev.is_cpu()) s.m.module->to(dev);  // before the optimizer takes its parameters
  // No clipping (the seed's script has none); inf/NaN gradients skip the step.
  s.opt = std::make_unique<optim::MixedPrecisionOptimizer>(optim::single_param_group(*s.m.module),
                                                           optimizer_factory(o), make_scaler(o),
                                                           optim::MixedPrecisionOptions{.clip_grad = 0});
  s.data_seed = o.seed;
  s.ckpt_dir = o.out + "/checkpoints";
  s.ckpts.emplace(s.ckpt_dir, o.keep_checkpoints);
  if (o.async_save) s.saver = std::make_unique<train::AsyncCheckpointSaver>(*s.ckpts);
  if (!o.resume.empty()) {
    // Every rank reads the same checkpoint: nobody writes before the DDP
    // broadcast below, which needs every rank.
    const ResumeSource src = find_resume(o, *s.ckpts);
    if (src.where.empty()) {
      if (lead) fmt::print("--resume auto: no checkpoint in {}; starting from the beginning\n", s.ckpt_dir);
    } else {
      s.start = restore(src.state, src.dir, src.where, s.m, *s.opt, o, s.data_seed, s.h);
      if (!lead) s.start.loss_sum = 0, s.start.correct = 0, s.start.seen = 0;  // rank 0 carries the sums
      if (lead) {
        fmt::print("resumed from {}: {} epochs done", src.where, s.start.epoch);
        if (s.start.batch > 0) fmt::print(" and {} batches of epoch {}", s.start.batch, s.start.epoch + 1);
        if (s.h.best_epoch > 0)
          fmt::print(" (best val acc {:.2f}% at epoch {})", 100 * s.h.best_val_acc, s.h.best_epoch);
        fmt::print(", continuing at epoch {}/{}\n", s.start.epoch + 1, o.epochs);
        if (s.data_seed != o.seed)
          fmt::print("using the checkpoint's data seed {} (not --seed {})\n", s.data_seed, o.seed);
      }
    }
  }
  s.epochs_done = s.start.epoch;
  if (s.rt.world > 1) {
    // Every rank must stand at rank 0's step: ranks that see different
    // checkpoint folders (no shared filesystem) would otherwise train on
    // with different optimizer states and data positions.
    Tensor range = from_vector<int64_t>({s.start.global_step, -s.start.global_step}, {2});
    dist::group().all_reduce(range, dist::ReduceOp::max);
    const int64_t hi = range.data_ptr<int64_t>()[0], lo = -range.data_ptr<int64_t>()[1];
    QK_CHECK_AS(ValueError, hi == lo, "The ranks resumed at different steps (", lo, " to ", hi, "; this is rank ",
                s.rt.rank, " at ", s.start.global_step, "): every rank must read the same checkpoints; is ",
                s.ckpt_dir, " on a filesystem all nodes share?");
  }
  if (s.rt.world > 1 && o.sync_bn) s.sync_bn_layers = dist::convert_sync_batchnorm(*s.m.module, dist::group());
  train::DataParallel dp;
  if (s.rt.world > 1) {
    dist::DDPOptions ddp_opts;
    ddp_opts.bucket_cap_mb = o.bucket_cap_mb;
    if (o.grad_compress != "none") ddp_opts.compress = o.grad_compress == "bf16" ? DType::bf16 : DType::f16;
    s.rt.ddp = std::make_unique<dist::DistributedDataParallel>(s.m.module, dist::group(), ddp_opts);
    dp = {&dist::group(), s.rt.ddp.get()};
  }
  // One micro-batch per step; the epoch sums are reduced at the epoch's end
  // and at checkpoints, not every step.
  s.runner = std::make_unique<train::StepRunner>(
      *s.opt, dp,
      train::StepRunnerOptions{.num_microbatches = 1,
                               .autocast = s.rt.amp ? std::optional<DType>(s.rt.amp_dtype) : std::nullopt,
                               .reduce_metrics = false});
  s.done = 2;
}

void Cifar10Training::build_data_loader() {
  require(2, "build_data_loader");
  State& s = *s_;
  const TrainCifarOptions& o = s.o;
  const bool lead = s.rt.lead();
  if (lead) make_dirs(s.ckpt_dir);
  data::DataLoaderOptions lo;
  lo.batch_size = s.batch_size;
  lo.shuffle = true;
  lo.num_workers = o.num_workers;
  lo.seed = s.data_seed;
  lo.num_replicas = s.rt.world;
  lo.rank = s.rt.rank;
  lo.transform.augment(o.augment);
  s.loader = std::make_unique<data::DataLoader>(std::make_shared<data::ImageDataset>(s.data->train), lo);
  s.nb = s.loader->num_batches();
  if (s.start.global_step < 0) s.start.global_step = static_cast<int64_t>(s.start.epoch) * s.nb + s.start.batch;
  QK_CHECK_AS(ValueError, s.start.batch < s.nb || s.start.batch == 0, "The checkpoint stopped after batch ",
              s.start.batch, " of an epoch, but this run has ", s.nb, " batches per epoch: resume with the same "
              "--batch-size, --global-batch-size and number of ranks");
  s.bar = lead && o.progress && ::isatty(STDOUT_FILENO);
  if (lead) {
    fmt::print("model {} ({} parameters), optimizer {} lr {} weight decay {}, batch {}, augment {}, seed {}, "
               "{} threads, {} loader workers{}{}\n",
               s.m.name, models::count_parameters(*s.m.module), o.optimizer, o.lr, o.weight_decay, s.batch_size,
               o.augment ? "on" : "off", o.seed, num_threads(), o.num_workers,
               s.rt.amp ? fmt::format(", amp {}", o.amp) : "", o.channels_last ? ", channels last" : "");
    if (s.rt.world > 1)
      fmt::print("data-parallel: {} ranks, batch {} per rank (global {}), DDP {} buckets of <= {} MB, gradients on "
                 "the wire: {}\n",
                 s.rt.world, s.batch_size, s.batch_size * s.rt.world, s.rt.ddp->num_buckets(), o.bucket_cap_mb,
                 o.grad_compress == "none" ? "f32" : o.grad_compress);
    if (o.sync_bn)
      fmt::print("SyncBatchNorm: {} BatchNorm layers normalise over all {} ranks' batches{}\n", s.sync_bn_layers,
                 s.rt.world, s.sync_bn_layers == 0 ? " (this model has none)" : "");
    fmt::print("training {} epochs, {} batches each{}; output in {}; checkpoints {} (keeping the last {})\n",
               o.epochs, s.nb, s.rt.world > 1 ? " per rank" : "", o.out,
               o.checkpoint_every > 0 ? fmt::format("every {} steps and at each epoch's end", o.checkpoint_every)
                                      : std::string("at each epoch's end"),
               o.keep_checkpoints);
  }
  s.done = 3;
}

void Cifar10Training::train() {
  require(3, "train");
  State& s = *s_;
  if (s.rt.lead() && s.start.epoch >= s.o.epochs) {
    fmt::print("nothing to train: the checkpoint has finished {} of --epochs {}; raise --epochs to go on\n",
               s.start.epoch, s.o.epochs);
  }
  s.global_step = s.start.global_step;
  for (int e = s.start.epoch; e < s.o.epochs; ++e) run_epoch(e);
  s.done = 4;
}

void Cifar10Training::run_epoch(int e) {
  State& s = *s_;
  const TrainCifarOptions& o = s.o;
  const Timer et;
  const bool resumed_epoch = e == s.start.epoch;
  const double earlier_s = resumed_epoch ? s.start.elapsed_s : 0;
  s.loader->set_epoch(static_cast<uint64_t>(e));
  s.loader->set_start_batch(resumed_epoch ? s.start.batch : 0);
  EpochSums initial;
  if (resumed_epoch) initial = {s.start.loss_sum, s.start.correct, s.start.seen};
  // After each step: a test's fault point, then a checkpoint when one is
  // due inside the epoch (the epoch's end checkpoints after evaluation).
  auto after_step = [&](int64_t batches_done, const EpochSums& sums) {
    fault::point("step", s.global_step);
    if (o.checkpoint_every <= 0 || s.global_step % o.checkpoint_every != 0 || batches_done == s.nb) return;
    const EpochSums all = all_ranks(sums, s.rt);
    if (!s.rt.lead()) return;
    Progress p{e, batches_done, s.global_step, all.loss_sum, all.correct, all.seen, earlier_s + et.seconds()};
    const std::string path = save_step_checkpoint(*s.ckpts, s.m, *s.opt, o, s.data_seed, s.h, p, s.saver.get());
    QK_DEBUG("checkpoint {} (epoch {}, batch {}{})", path, e + 1, batches_done, s.saver ? ", the one before" : "");
  };
  const EpochSums all =
      train_epoch(s.m, *s.runner, *s.loader, s.rt, initial, s.global_step, e, o.epochs, s.bar, after_step);
  const double train_s = et.seconds();
  s.epochs_done = e + 1;
  if (!s.rt.lead()) return;  // rank 0 evaluates, logs and checkpoints
  const double train_loss = all.loss_sum / static_cast<double>(all.seen);
  const double train_acc = static_cast<double>(all.correct) / static_cast<double>(all.seen);
  const models::EvalResult v = models::evaluate_cifar(s.m, s.data->test);
  const double secs = earlier_s + et.seconds();
  History& h = s.h;
  h.curves.train_loss.push_back(train_loss);
  h.curves.train_acc.push_back(train_acc);
  h.curves.val_loss.push_back(v.loss);
  h.curves.val_acc.push_back(v.accuracy);
  h.epoch_seconds.push_back(secs);
  double mean = 0;
  for (double t : h.epoch_seconds) mean += t;
  mean /= static_cast<double>(h.epoch_seconds.size());
  std::string extra;
  if (s.rt.world > 1)
    extra += fmt::format("  comm wait {:.1f} ms/step", s.rt.comm_wait_ms / std::max<int64_t>(s.rt.steps, 1));
  if (s.rt.skipped > 0)
    extra += fmt::format("  {} steps skipped (inf/nan), loss scale {}", s.rt.skipped, s.opt->loss_scale());
  // Images per second over the images this process saw trained (a resumed
  // epoch counts only its remaining batches).
  const double trained = static_cast<double>(all.seen - (resumed_epoch ? s.start.seen : 0));
  fmt::print("Epoch {}/{}  train loss {:.4f} acc {:.2f}%  val loss {:.4f} acc {:.2f}%  time {}  ETA {}  "
             "{:.0f} img/s  peak mem {}{}\n",
             e + 1, o.epochs, train_loss, 100 * train_acc, v.loss, 100 * v.accuracy, format_duration(secs),
             format_duration(mean * (o.epochs - e - 1)), trained / train_s, format_bytes(peak_rss_bytes()), extra);
  std::fflush(stdout);
  const bool best = v.accuracy > h.best_val_acc;
  if (best) h.best_val_acc = v.accuracy, h.best_epoch = e + 1;
  const Progress done{e + 1, 0, s.global_step, 0, 0, 0, 0};
  save_step_checkpoint(*s.ckpts, s.m, *s.opt, o, s.data_seed, h, done, s.saver.get());
  save_tagged(s.ckpt_dir, "latest", s.m, *s.opt, o, s.data_seed, h, done);
  if (best) save_tagged(s.ckpt_dir, "best", s.m, *s.opt, o, s.data_seed, h, done);
}

void Cifar10Training::finish() {
  require(4, "finish");
  State& s = *s_;
  s.done = 5;
  if (!s.rt.lead()) return;
  if (s.saver) s.saver->wait();  // the last step checkpoint is on disk
  const History& h = s.h;
  double sum = 0;
  for (double t : h.epoch_seconds) sum += t;
  fmt::print("Training complete!\n");
  fmt::print("total time: {}\n", format_duration(s.total.seconds()));
  fmt::print("best validation accuracy: {:.2f}% (epoch {})\n", 100 * h.best_val_acc, h.best_epoch);
  fmt::print("mean epoch time: {}\n", format_duration(h.epoch_seconds.empty() ? 0 : sum / h.epoch_seconds.size()));
  fmt::print("checkpoints: {}/latest.safetensors, {}/best.safetensors (resumable: {}/step-*)\n", s.ckpt_dir,
             s.ckpt_dir, s.ckpt_dir);
  const std::string png = s.o.out + "/training_curves.png";
  plot::plot_training_curves(png, fmt::format("{} on {}CIFAR-10", s.m.name, s.data->synthetic ? "SYNTHETIC " : ""),
                             h.curves);
  fmt::print("training curves saved to {}\n", png);
}

void train_cifar10(const TrainCifarOptions& o) {
  Cifar10Training run(o);
  run.initialize();
  run.setup_model_and_optimizer();
  run.build_data_loader();
  run.train();
  run.finish();
}

}  // namespace qk::recipes
