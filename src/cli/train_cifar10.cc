#include "cli/train_cifar10.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/cifar_common.h"
#include "cli/plot.h"
#include "qk/amp/grad_scaler.h"
#include "qk/autograd/autocast.h"
#include "qk/autograd/functions.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/base/thread_pool.h"
#include "qk/base/timer.h"
#include "qk/data/dataset.h"
#include "qk/data/loader.h"
#include "qk/dist/ddp.h"
#include "qk/dist/launch_env.h"
#include "qk/dist/process_group.h"
#include "qk/nn/serialize.h"
#include "qk/optim/adam.h"
#include "qk/optim/sgd.h"
#include "qk/tensor/generator.h"

namespace qk::cli {
namespace {

using nlohmann::json;

// How the steps run: mixed precision and, under qk run, data parallelism.
struct StepRuntime {
  bool amp = false;
  DType amp_dtype = DType::bf16;
  amp::GradScaler scaler{amp::GradScalerOptions{.enabled = false}};
  int rank = 0, world = 1;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  double comm_wait_ms = 0;  // this epoch: waiting for gradients after backward
  int64_t steps = 0, skipped = 0;
  bool lead() const { return rank == 0; }
};

// What a checkpoint sidecar records besides the weights and optimizer files.
struct History {
  TrainingCurves curves;
  std::vector<double> epoch_seconds;
  double best_val_acc = -1;
  int best_epoch = 0;
};

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainCifarOptions& o, const nn::Module& m) {
  if (o.optimizer == "adam") {
    return std::make_unique<optim::Adam>(m.parameters(), optim::AdamOptions(o.lr).weight_decay(o.weight_decay));
  }
  if (o.optimizer == "sgd") {
    return std::make_unique<optim::SGD>(
        m.parameters(), optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  }
  QK_THROW(ValueError, "Unknown --optimizer '", o.optimizer, "'; expected adam or sgd");
}

void rename_or_throw(const std::string& from, const std::string& to) {
  QK_CHECK_AS(IoError, std::rename(from.c_str(), to.c_str()) == 0, "Cannot rename '", from, "' to '", to,
              "'; is the folder writable?");
}

// Writes DIR/TAG.optim.safetensors, DIR/TAG.safetensors, then DIR/TAG.json.
void save_checkpoint(const std::string& dir, const std::string& tag, const CifarModel& m,
                     const optim::Optimizer& opt, const amp::GradScaler& scaler, const TrainCifarOptions& o,
                     uint64_t data_seed, int epoch, const History& h) {
  const std::string weights = dir + "/" + tag + ".safetensors";
  const std::string optim_file = tag + ".optim.safetensors";
  optim::save(opt, dir + "/" + optim_file + ".tmp");
  rename_or_throw(dir + "/" + optim_file + ".tmp", dir + "/" + optim_file);
  nn::save(*m.module, weights + ".tmp", {{"model", m.name}, {"epoch", std::to_string(epoch)}});
  rename_or_throw(weights + ".tmp", weights);
  const Generator& g = default_generator();
  json j;
  j["format"] = "qk-cifar10-checkpoint-v1";
  j["model"] = m.name;
  j["epoch"] = epoch;  // epochs finished; a resumed run starts at epoch + 1 (1-based)
  j["epochs"] = o.epochs;
  j["weights"] = tag + ".safetensors";
  j["optimizer"] = o.optimizer;
  j["optimizer_state"] = optim_file;
  j["rng"] = {{"seed", g.seed()}, {"offset", g.offset()}};
  j["data_seed"] = data_seed;
  j["hparams"] = {{"batch_size", o.batch_size}, {"lr", o.lr}, {"weight_decay", o.weight_decay},
                  {"augment", o.augment}, {"momentum", o.momentum}};
  j["metrics"] = {{"train_loss", h.curves.train_loss}, {"train_acc", h.curves.train_acc},
                  {"val_loss", h.curves.val_loss},     {"val_acc", h.curves.val_acc},
                  {"epoch_seconds", h.epoch_seconds}};
  j["best_val_acc"] = h.best_val_acc;
  j["best_epoch"] = h.best_epoch;
  j["amp"] = o.amp;
  if (scaler.is_enabled()) j["grad_scaler"] = scaler.state_dict();
  atomic_write_file(dir + "/" + tag + ".json", j.dump(2) + "\n");
}

// The sidecar for --resume: "auto" -> OUT/checkpoints/latest.json; a
// .safetensors path -> the .json next to it.
std::string sidecar_path(const TrainCifarOptions& o) {
  if (o.resume == "auto") return o.out + "/checkpoints/latest.json";
  const std::string ext = ".safetensors";
  if (o.resume.size() > ext.size() && o.resume.ends_with(ext)) {
    return o.resume.substr(0, o.resume.size() - ext.size()) + ".json";
  }
  return o.resume;
}

// Restores model, optimizer, RNG and history; returns the epochs finished.
int resume_from(const std::string& path, const CifarModel& m, optim::Optimizer& opt, amp::GradScaler& scaler,
                const TrainCifarOptions& o, uint64_t& data_seed, History& h) {
  json j;
  try {
    j = json::parse(read_file(path));
    const std::string dir = path.substr(0, path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
    const std::string model = j.at("model").get<std::string>();
    QK_CHECK_AS(ValueError, model == m.name, "Checkpoint '", path, "' was trained with --model ", model,
                ", not --model ", m.name, "; pass --model ", model);
    const std::string optimizer = j.at("optimizer").get<std::string>();
    QK_CHECK_AS(ValueError, optimizer == o.optimizer, "Checkpoint '", path, "' was trained with --optimizer ",
                optimizer, ", not ", o.optimizer);
    const std::string weights = dir + j.at("weights").get<std::string>();
    load_cifar_weights(m, weights);
    const auto meta = nn::load_safetensors(weights).metadata;
    const int epoch = j.at("epoch").get<int>();
    QK_CHECK_AS(IoError, meta.count("epoch") && meta.at("epoch") == std::to_string(epoch), "Checkpoint '",
                weights, "' does not hold epoch ", epoch, " that its sidecar '", path,
                "' names (interrupted while saving?); resume from checkpoints/best.json or start again");
    optim::load(opt, dir + j.at("optimizer_state").get<std::string>());
    default_generator().set_state(j.at("rng").at("seed").get<uint64_t>(), j.at("rng").at("offset").get<uint64_t>());
    data_seed = j.at("data_seed").get<uint64_t>();
    const json& mt = j.at("metrics");
    h.curves.train_loss = mt.at("train_loss").get<std::vector<double>>();
    h.curves.train_acc = mt.at("train_acc").get<std::vector<double>>();
    h.curves.val_loss = mt.at("val_loss").get<std::vector<double>>();
    h.curves.val_acc = mt.at("val_acc").get<std::vector<double>>();
    h.epoch_seconds = mt.at("epoch_seconds").get<std::vector<double>>();
    h.best_val_acc = j.at("best_val_acc").get<double>();
    h.best_epoch = j.at("best_epoch").get<int>();
    if (scaler.is_enabled() && j.contains("grad_scaler"))
      scaler.load_state_dict(j.at("grad_scaler").get<std::map<std::string, double>>());
    QK_CHECK_AS(IoError, epoch >= 0 && h.curves.val_acc.size() == static_cast<size_t>(epoch), "Checkpoint sidecar '",
                path, "' is inconsistent: epoch ", epoch, " but ", h.curves.val_acc.size(), " epochs of metrics");
    return epoch;
  } catch (const json::exception& e) {
    QK_THROW(IoError, "Cannot read checkpoint sidecar '", path, "': ", e.what(),
             "; it should be the JSON `qk train cifar10` writes next to the weights");
  }
}

// One pass over the training set; returns (mean loss, accuracy) over every
// rank's samples.
std::pair<double, double> train_epoch(const CifarModel& m, optim::Optimizer& opt, data::DataLoader& loader,
                                      StepRuntime& rt, int epoch, int epochs, bool bar) {
  m.module->train();
  double loss_sum = 0;
  int64_t correct = 0, seen = 0;
  const int64_t nb = loader.num_batches();
  const Timer t;
  double last_bar = -1;
  rt.comm_wait_ms = 0;
  rt.steps = 0;
  for (const data::Batch& b : loader) {
    opt.zero_grad();
    if (rt.ddp) rt.ddp->prepare_forward();
    Tensor logits, loss;
    {
      autocast::Guard amp(rt.amp_dtype, rt.amp);
      logits = m.forward(b.images);
      loss = cross_entropy(logits, b.labels);
    }
    rt.scaler.scale(loss).backward();
    if (rt.ddp) rt.comm_wait_ms += rt.ddp->last_step().wait_ms;
    if (!rt.scaler.step(opt)) ++rt.skipped;
    rt.scaler.update();
    ++rt.steps;
    const int64_t n = b.labels.numel();
    loss_sum += loss.item<float>() * static_cast<double>(n);
    const Tensor l = logits.detach().to(DType::f32).contiguous();
    const float* p = l.data_ptr<float>();
    const int64_t* y = b.labels.data_ptr<int64_t>();
    const int64_t k = l.size(1);
    for (int64_t i = 0; i < n; ++i) {
      correct += std::max_element(p + i * k, p + (i + 1) * k) - (p + i * k) == y[i];
    }
    seen += n;
    if (bar && (t.seconds() - last_bar > 0.25 || b.index + 1 == nb)) {
      last_bar = t.seconds();
      const int width = 30, done = static_cast<int>(width * (b.index + 1) / nb);
      fmt::print("\rEpoch {}/{} [{}{}] {}/{} loss {:.4f} acc {:.2f}% {:.0f} img/s ", epoch + 1, epochs,
                 std::string(done, '='), std::string(width - done, ' '), b.index + 1, nb,
                 loss_sum / static_cast<double>(seen), 100.0 * correct / seen, rt.world * seen / t.seconds());
      std::fflush(stdout);
    }
  }
  if (bar) fmt::print("\r{}\r", std::string(110, ' '));
  if (rt.world > 1) {
    Tensor sums = from_vector<double>({loss_sum, static_cast<double>(correct), static_cast<double>(seen)}, {3});
    dist::group().all_reduce(sums);
    const double* v = sums.data_ptr<double>();
    loss_sum = v[0], correct = static_cast<int64_t>(v[1]), seen = static_cast<int64_t>(v[2]);
  }
  QK_CHECK(seen > 0, "The training set is empty");
  return {loss_sum / static_cast<double>(seen), static_cast<double>(correct) / static_cast<double>(seen)};
}

}  // namespace

void train_cifar10(const TrainCifarOptions& o) {
  QK_CHECK_AS(ValueError, o.epochs >= 1 && o.epochs <= 100000, "--epochs must be 1..100000, got ", o.epochs);
  QK_CHECK_AS(ValueError, o.batch_size >= 1 && o.batch_size <= 65536, "--batch-size must be 1..65536, got ",
              o.batch_size);
  QK_CHECK_AS(ValueError, o.lr > 0 && o.lr < 100, "--lr must be in (0, 100), got ", o.lr);
  QK_CHECK_AS(ValueError, o.weight_decay >= 0, "--weight-decay must be >= 0, got ", o.weight_decay);
  QK_CHECK_AS(ValueError, o.amp == "off" || o.amp == "bf16" || o.amp == "fp16",
              "--amp must be off, bf16 or fp16, got '", o.amp, "'");
  QK_CHECK_AS(ValueError, o.grad_compress == "none" || o.grad_compress == "bf16" || o.grad_compress == "fp16",
              "--grad-compress must be none, bf16 or fp16, got '", o.grad_compress, "'");
  if (o.threads > 0) set_num_threads(o.threads);
  const Timer total;

  StepRuntime rt;
  if (dist::launch_env().world_size > 1) {
    dist::init();
    rt.rank = dist::rank();
    rt.world = dist::world_size();
  }
  const bool lead = rt.lead();
  rt.amp = o.amp != "off";
  rt.amp_dtype = o.amp == "fp16" ? DType::f16 : DType::bf16;
  rt.scaler = amp::GradScaler(amp::GradScalerOptions{.enabled = o.amp == "fp16"});

  // Rank 0 writes the synthetic set when there is none; the others read it after.
  std::optional<data::Cifar10> data_holder;
  if (lead) data_holder.emplace(open_cifar10(o.data_dir, true, o.synth_train, o.synth_test, 0));
  if (rt.world > 1) dist::group().barrier();
  if (!lead) data_holder.emplace(open_cifar10(o.data_dir, false, o.synth_train, o.synth_test, 0));
  const data::Cifar10& d = *data_holder;

  manual_seed(o.seed);
  const CifarModel m = make_cifar_model(o.model);
  auto opt = make_optimizer(o, *m.module);
  uint64_t data_seed = o.seed;
  History h;
  int start = 0;
  if (!o.resume.empty()) {
    const std::string side = sidecar_path(o);
    if (o.resume == "auto" && !file_exists(side)) {
      if (lead) fmt::print("--resume auto: no checkpoint at {}; starting from epoch 1\n", side);
    } else {
      start = resume_from(side, m, *opt, rt.scaler, o, data_seed, h);
      if (lead)
        fmt::print("resumed from {}: {} epochs done (best val acc {:.2f}% at epoch {}), continuing at epoch {}/{}\n",
                   side, start, 100 * h.best_val_acc, h.best_epoch, start + 1, o.epochs);
      if (lead && data_seed != o.seed)
        fmt::print("using the checkpoint's data seed {} (not --seed {})\n", data_seed, o.seed);
    }
  }
  if (rt.world > 1) {
    dist::DDPOptions ddp_opts;
    ddp_opts.bucket_cap_mb = o.bucket_cap_mb;
    if (o.grad_compress != "none") ddp_opts.compress = o.grad_compress == "bf16" ? DType::bf16 : DType::f16;
    rt.ddp = std::make_unique<dist::DistributedDataParallel>(m.module, dist::group(), ddp_opts);
  }

  const std::string ckpt_dir = o.out + "/checkpoints";
  if (lead) make_dirs(ckpt_dir);
  data::DataLoaderOptions lo;
  lo.batch_size = o.batch_size;
  lo.shuffle = true;
  lo.num_workers = o.num_workers;
  lo.seed = data_seed;
  lo.num_replicas = rt.world;
  lo.rank = rt.rank;
  lo.transform.augment(o.augment);
  data::DataLoader loader(std::make_shared<data::ImageDataset>(d.train), lo);
  const bool bar = lead && o.progress && ::isatty(STDOUT_FILENO);
  if (lead) {
    fmt::print("model {} ({} parameters), optimizer {} lr {} weight decay {}, batch {}, augment {}, seed {}, "
               "{} threads, {} loader workers{}\n",
               m.name, count_parameters(*m.module), o.optimizer, o.lr, o.weight_decay, o.batch_size,
               o.augment ? "on" : "off", o.seed, num_threads(), o.num_workers,
               rt.amp ? fmt::format(", amp {}", o.amp) : "");
    if (rt.world > 1)
      fmt::print("data-parallel: {} ranks, batch {} per rank (global {}), DDP {} buckets of <= {} MB, gradients on "
                 "the wire: {}\n",
                 rt.world, o.batch_size, o.batch_size * rt.world, rt.ddp->num_buckets(), o.bucket_cap_mb,
                 o.grad_compress == "none" ? "f32" : o.grad_compress);
    fmt::print("training {} epochs, {} batches each{}; output in {}\n", o.epochs, loader.num_batches(),
               rt.world > 1 ? " per rank" : "", o.out);
  }

  if (lead && start >= o.epochs) {
    fmt::print("nothing to train: the checkpoint has finished {} of --epochs {}; raise --epochs to go on\n", start,
               o.epochs);
  }
  for (int e = start; e < o.epochs; ++e) {
    const Timer et;
    loader.set_epoch(static_cast<uint64_t>(e));
    const auto [train_loss, train_acc] = train_epoch(m, *opt, loader, rt, e, o.epochs, bar);
    const double train_s = et.seconds();
    if (!lead) continue;  // rank 0 evaluates, logs and checkpoints
    const EvalResult v = evaluate_cifar(m, d.test);
    const double secs = et.seconds();
    h.curves.train_loss.push_back(train_loss);
    h.curves.train_acc.push_back(train_acc);
    h.curves.val_loss.push_back(v.loss);
    h.curves.val_acc.push_back(v.accuracy);
    h.epoch_seconds.push_back(secs);
    double mean = 0;
    for (double s : h.epoch_seconds) mean += s;
    mean /= static_cast<double>(h.epoch_seconds.size());
    std::string extra;
    if (rt.world > 1)
      extra += fmt::format("  comm wait {:.1f} ms/step", rt.comm_wait_ms / std::max<int64_t>(rt.steps, 1));
    if (rt.skipped > 0) extra += fmt::format("  {} steps skipped (inf/nan), loss scale {}", rt.skipped,
                                             rt.scaler.get_scale());
    fmt::print("Epoch {}/{}  train loss {:.4f} acc {:.2f}%  val loss {:.4f} acc {:.2f}%  time {}  ETA {}  "
               "{:.0f} img/s  peak mem {}{}\n",
               e + 1, o.epochs, train_loss, 100 * train_acc, v.loss, 100 * v.accuracy, format_duration(secs),
               format_duration(mean * (o.epochs - e - 1)), static_cast<double>(d.train.size()) / train_s,
               format_bytes(peak_rss_bytes()), extra);
    std::fflush(stdout);
    const bool best = v.accuracy > h.best_val_acc;
    if (best) h.best_val_acc = v.accuracy, h.best_epoch = e + 1;
    save_checkpoint(ckpt_dir, "latest", m, *opt, rt.scaler, o, data_seed, e + 1, h);
    if (best) save_checkpoint(ckpt_dir, "best", m, *opt, rt.scaler, o, data_seed, e + 1, h);
  }
  if (!lead) return;

  double sum = 0;
  for (double s : h.epoch_seconds) sum += s;
  fmt::print("Training complete!\n");
  fmt::print("total time: {}\n", format_duration(total.seconds()));
  fmt::print("best validation accuracy: {:.2f}% (epoch {})\n", 100 * h.best_val_acc, h.best_epoch);
  fmt::print("mean epoch time: {}\n", format_duration(h.epoch_seconds.empty() ? 0 : sum / h.epoch_seconds.size()));
  fmt::print("checkpoints: {}/latest.safetensors, {}/best.safetensors\n", ckpt_dir, ckpt_dir);
  const std::string png = o.out + "/training_curves.png";
  plot_training_curves(png, fmt::format("{} on {}CIFAR-10", m.name, d.synthetic ? "SYNTHETIC " : ""), h.curves);
  fmt::print("training curves saved to {}\n", png);
}

}  // namespace qk::cli
