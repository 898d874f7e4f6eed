// `qk train cifar10`: train SimpleCNN or the ResNet on CIFAR-10 (the seed's
// train_cifar10.py), with checkpoints, resume and training curves.
//
//   qk train cifar10                                   # SimpleCNN, 5 epochs, synthetic data if ./data is empty
//   qk train cifar10 --model simple_resnet --epochs 10 --augment --out runs/resnet
//   qk train cifar10 --epochs 10 --resume              # continue runs/cifar10 where it stopped
//   qk run --max-restarts 10 -- qk train cifar10 --resume --checkpoint-every 100   # survives killed ranks
//   qk train cifar10 --amp bf16                        # autocast
//   qk train cifar10 --device cuda --cuda-graph
//   qk run --nproc-per-node 2 -- qk train cifar10      # data-parallel (DDP)
#include <memory>

#include "command.h"
#include "qk/recipes/cifar10_trainer.h"
#include "qk/tensor/cuda.h"

namespace qk::cli {
namespace {

void setup_train(CLI::App& app) {
  app.require_subcommand(1);
  CLI::App* c = app.add_subcommand("cifar10", "Train an image classifier on CIFAR-10 (or its synthetic stand-in)");
  auto o = std::make_shared<recipes::TrainCifarOptions>();
  c->add_option("--model", o->model, "simple_cnn | simple_resnet")
      ->check(CLI::IsMember({"simple_cnn", "simple_resnet"}))
      ->capture_default_str();
  c->add_option("--epochs", o->epochs, "Epochs to train (a resumed run stops at this total)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  c->add_option("--batch-size", o->batch_size, "Images per step (per rank under qk run)")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  c->add_option("--global-batch-size", o->global_batch_size,
                "Images per step over all ranks; must divide by the number of ranks (overrides --batch-size)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  c->add_option("--lr", o->lr, "Learning rate")->capture_default_str();
  c->add_option("--optimizer", o->optimizer, "adam | sgd")
      ->check(CLI::IsMember({"adam", "sgd"}))
      ->capture_default_str();
  c->add_option("--momentum", o->momentum, "SGD momentum")->capture_default_str();
  c->add_option("--weight-decay", o->weight_decay, "L2 weight decay")->capture_default_str();
  c->add_flag("--augment", o->augment, "Random crop (4-pixel padding) and horizontal flip");
  c->add_option("--seed", o->seed, "Seed for initialisation, dropout, shuffling and augmentation")
      ->capture_default_str();
  c->add_option("--data-dir", o->data_dir, "CIFAR-10 folder; a synthetic set is written there when it has none")
      ->capture_default_str();
  c->add_option("--out", o->out, "Output folder (checkpoints/, training_curves.png)")->capture_default_str();
  c->add_option("--threads", o->threads, "Compute threads (0: default)")->check(CLI::Range(0, 1024));
  c->add_option("--num-workers", o->num_workers, "Data loader threads")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  // An option with an optional value, so `--resume auto` (torchrun-style
  // scripts) works like `--resume` and `--resume=auto`.
  c->add_option("--resume", o->resume,
                "--resume, --resume auto or --resume=auto: continue from the newest valid "
                "OUT/checkpoints/step-* folder, skipping corrupt ones (a fresh start when there is none); "
                "--resume PATH: that checkpoint folder or .json sidecar. Not given: a fresh start")
      ->expected(0, 1)
      ->default_str("auto");
  c->add_option("--checkpoint-every", o->checkpoint_every,
                "Also checkpoint every N optimizer steps (0: only at each epoch's end)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  c->add_option("--keep-checkpoints", o->keep_checkpoints, "Resumable checkpoint folders to keep (newest)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  c->add_flag("--async-save", o->async_save,
              "Write the resumable checkpoints in the background (a step pays for a host copy; one save at a time)");
  c->add_option("--synth-train", o->synth_train, "Training images of the synthetic set written when needed")
      ->check(CLI::Range(int64_t{5}, int64_t{50000}))
      ->capture_default_str();
  c->add_option("--synth-test", o->synth_test, "Test images of the synthetic set written when needed")
      ->check(CLI::Range(int64_t{1}, int64_t{10000}))
      ->capture_default_str();
  c->add_option("--device", o->device, "cpu, cuda or cuda:N: where the model and each batch live "
                 "(cuda: the local rank's GPU; under qk run, gradients all-reduce through NCCL)")
      ->capture_default_str();
  c->add_option("--amp", o->amp, "Mixed precision: off, bf16 (autocast) or fp16 (autocast + loss scaling)")
      ->check(CLI::IsMember({"off", "bf16", "fp16"}))
      ->capture_default_str();
  c->add_option("--bucket-cap-mb", o->bucket_cap_mb, "DDP gradient bucket size in MB (under qk run)")
      ->check(CLI::Range(0.001, 4096.0))
      ->capture_default_str();
  c->add_option("--grad-compress", o->grad_compress, "DDP gradients on the wire: none, bf16 or fp16 (half the bytes)")
      ->check(CLI::IsMember({"none", "bf16", "fp16"}))
      ->capture_default_str();
  c->add_flag("--channels-last", o->channels_last,
              "Activations stored NHWC (PyTorch's channels_last): cuDNN's NHWC convolutions on a GPU, "
              "oneDNN's on the CPU");
  c->add_flag("--cuda-graph", o->cuda_graph,
              "Record each step's forward and backward as a CUDA graph and replay it (one GPU)");
  auto benchmark = std::make_shared<bool>(false);
  c->add_flag("--cudnn-benchmark", *benchmark,
              "Time cuDNN's convolution algorithms once per shape and keep the fastest "
              "(torch.backends.cudnn.benchmark; also QK_CUDNN_BENCHMARK=1)");
  c->add_flag("--sync-bn", o->sync_bn,
              "Under qk run: BatchNorm statistics over every rank's batch (SyncBatchNorm), not each rank's own");
  c->add_flag("!--no-progress", o->progress, "No live progress bar (it is shown only on a terminal anyway)");
  c->callback([o, benchmark] {
    if (*benchmark) cuda::set_cudnn_benchmark(true);
    recipes::train_cifar10(*o);
  });
}

}  // namespace

QK_REGISTER_COMMAND(train, "Train a model (cifar10)", setup_train);

}  // namespace qk::cli
