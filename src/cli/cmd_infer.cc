// `qk infer cifar10`: latency, throughput, accuracy and a picture of the
// predictions of a checkpoint written by `qk train cifar10`.
//
//   qk infer cifar10 --model simple_cnn --checkpoint runs/cifar10/checkpoints/best.safetensors
//   qk infer cifar10 --model simple_cnn --checkpoint ... --benchmark --visualize --out runs/cifar10
#include <memory>

#include "command.h"
#include "infer_cifar10.h"

namespace qk::cli {
namespace {

void setup_infer(CLI::App& app) {
  app.require_subcommand(1);
  CLI::App* c = app.add_subcommand("cifar10", "Benchmark and evaluate a CIFAR-10 checkpoint");
  auto o = std::make_shared<InferCifarOptions>();
  c->add_option("--model", o->model, "simple_cnn | simple_resnet (as trained)")
      ->check(CLI::IsMember({"simple_cnn", "simple_resnet"}))
      ->capture_default_str();
  c->add_option("--checkpoint", o->checkpoint, "Weights (.safetensors) written by qk train cifar10")
      ->capture_default_str();
  c->add_option("--data-dir", o->data_dir, "CIFAR-10 folder (the one used for training)")->capture_default_str();
  c->add_option("--out", o->out, "Folder for inference_results.png")->capture_default_str();
  c->add_flag("--benchmark", o->benchmark, "Full timing table for batch sizes 1, 2, 4, ..., 256");
  c->add_flag("--visualize", o->visualize, "Write OUT/inference_results.png: images, true and predicted class");
  c->add_option("--grid", o->grid, "Images in inference_results.png")->check(CLI::Range(1, 100))->capture_default_str();
  c->add_option("--threads", o->threads, "Compute threads (0: default)")->check(CLI::Range(0, 1024));
  c->add_option("--device", o->device, "cpu, cuda or cuda:N: where the model runs (timings wait for the device)")
      ->capture_default_str();
  c->callback([o] { infer_cifar10(*o); });
}

}  // namespace

QK_REGISTER_COMMAND(infer, "Run a trained model (cifar10)", setup_infer);

}  // namespace qk::cli
