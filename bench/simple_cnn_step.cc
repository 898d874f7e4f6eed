// Training-step and inference throughput of the seed's SimpleCNN and ResNet
// (3x32x32 inputs, cross-entropy), the figures compared with PyTorch by
// bench/simple_cnn_vs_torch.sh (training step, SGD) and bench/cifar_vs_torch.sh
// (training with the trainer's Adam, inference, batch-1 latency).
//
//   simple_cnn_step --model simple_cnn --threads 2 --batch 64 --steps 30 --warmup 5
//                   [--mode train|infer] [--optimizer sgd|adam] [--amp off|bf16] [--device cpu|cuda]
//                   [--cudnn-benchmark 0|1] [--cuda-graph 0|1] [--channels-last 0|1]
//
// train: forward + loss + backward + optimizer step in train mode (dropout on).
// infer: forward only, eval mode, no autograd graph (as `qk infer cifar10`);
//        --batch 1 gives the single-image latency. --cuda-graph 1 (a GPU only)
//        records the forward once after the warm-up and replays it each step
//        (qk::capture_graph): the latency without the host's per-op time.
//        Training with graphs is `qk train cifar10 --cuda-graph`.
// Prints one JSON line: images_per_s, ms_per_step, peak_rss_mb, peak_tensor_mb.
// One configuration per process, so peak_rss_mb is that configuration's own.
// --device cuda: model, batch and step on the GPU (every step ends in
// loss.item(), which waits for it); peak_tensor_mb is then the GPU's.
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "qk/autograd/autograd.h"
#include "qk/autograd/functions.h"
#include "qk/base/thread_pool.h"
#include "qk/base/timer.h"
#include "qk/autograd/autocast.h"
#include "qk/models/resnet.h"
#include "qk/models/simple_cnn.h"
#include "qk/optim/adam.h"
#include "qk/optim/sgd.h"
#include "qk/tensor/backend.h"
#include "qk/tensor/cuda.h"
#include "qk/tensor/ops/memory_format.h"

int main(int argc, char** argv) {
  int threads = 1, batch = 64, steps = 30, warmup = 5;
  std::string model = "simple_cnn", mode = "train", optimizer = "sgd", amp = "off", device = "cpu";
  bool cudnn_benchmark = false, cuda_graph = false, channels_last = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--threads") threads = std::atoi(argv[i + 1]);
    else if (k == "--batch") batch = std::atoi(argv[i + 1]);
    else if (k == "--steps") steps = std::atoi(argv[i + 1]);
    else if (k == "--warmup") warmup = std::atoi(argv[i + 1]);
    else if (k == "--model") model = argv[i + 1];
    else if (k == "--mode") mode = argv[i + 1];
    else if (k == "--optimizer") optimizer = argv[i + 1];
    else if (k == "--amp") amp = argv[i + 1];
    else if (k == "--device") device = argv[i + 1];
    else if (k == "--cudnn-benchmark") cudnn_benchmark = std::string(argv[i + 1]) == "1";
    else if (k == "--cuda-graph") cuda_graph = std::string(argv[i + 1]) == "1";
    else if (k == "--channels-last") channels_last = std::string(argv[i + 1]) == "1";
    else {
      fmt::print(stderr, "unknown flag {}\n", k);
      return 2;
    }
  }
  if ((mode != "train" && mode != "infer") || (optimizer != "sgd" && optimizer != "adam") ||
      (model != "simple_cnn" && model != "simple_resnet") || (amp != "off" && amp != "bf16")) {
    fmt::print(stderr,
               "expected --model simple_cnn|simple_resnet --mode train|infer --optimizer sgd|adam --amp off|bf16\n");
    return 2;
  }
  if (cuda_graph && (mode != "infer" || device == "cpu")) {
    fmt::print(stderr, "--cuda-graph 1 needs --mode infer on a GPU (training with graphs: qk train cifar10 --cuda-graph)\n");
    return 2;
  }
  qk::set_num_threads(threads);
  qk::cuda::set_cudnn_benchmark(cudnn_benchmark);  // convolution algorithms timed once per shape
  qk::manual_seed(0);
  std::shared_ptr<qk::nn::Module> net;
  std::function<qk::Tensor(const qk::Tensor&)> fwd;
  if (model == "simple_cnn") {
    qk::models::SimpleCNN m(10);
    net = m.ptr();
    fwd = [m](const qk::Tensor& x) { return m->forward(x); };
  } else {
    qk::models::SimpleResNet m(10);
    net = m.ptr();
    fwd = [m](const qk::Tensor& x) { return m->forward(x); };
  }
  const qk::Device dev(device);
  if (!dev.is_cpu() && (!qk::has_backend(dev.type) || qk::backend(dev.type).device_count() <= dev.index)) {
    fmt::print(stderr, "simple_cnn_step: {} is not available ({})\n", dev.str(),
               qk::has_backend(dev.type) ? qk::backend(dev.type).unavailable_reason() : "no backend in this build");
    return 1;
  }
  if (!dev.is_cpu()) net->to(dev);  // before the optimizer takes the parameters
  std::unique_ptr<qk::optim::Optimizer> opt;
  if (mode == "train" && optimizer == "sgd") {
    opt = std::make_unique<qk::optim::SGD>(net->parameters(), qk::optim::SGDOptions(0.01).momentum(0.9));
  } else if (mode == "train") {
    opt = std::make_unique<qk::optim::Adam>(net->parameters(), qk::optim::AdamOptions(1e-3));
  }
  qk::Tensor x = qk::randn({batch, 3, 32, 32}).to(dev);
  // As the peer's x.to(memory_format=torch.channels_last): converted once.
  if (channels_last) x = qk::ops::contiguous(x, qk::ops::MemoryFormat::channels_last);
  qk::Tensor y = qk::randint(0, 10, {batch}).to(dev);
  double loss_val = 0;
  std::function<void()> step;
  if (mode == "train") {
    step = [&] {
      opt->zero_grad();
      qk::Tensor loss;
      {
        qk::autocast::Guard guard(qk::DType::bf16, amp == "bf16");  // as qk train cifar10 --amp bf16
        loss = qk::cross_entropy(fwd(x), y);
      }
      loss.backward();
      opt->step();
      loss_val = loss.item<double>();
    };
  } else {
    net->eval();
    step = [&] {
      qk::NoGradGuard no_grad;
      qk::autocast::Guard guard(qk::DType::bf16, amp == "bf16");
      loss_val = fwd(x).sum().item<double>();  // item() waits for the result, as torch's peer does
    };
  }
  for (int i = 0; i < warmup; ++i) step();
  std::unique_ptr<qk::DeviceGraph> graph;
  qk::Tensor graph_out;  // the recorded forward's result, rewritten by each replay
  if (cuda_graph) {
    graph = qk::capture_graph(dev, [&] {
      qk::NoGradGuard no_grad;
      qk::autocast::Guard guard(qk::DType::bf16, amp == "bf16");
      graph_out = fwd(x).sum();
    });
    step = [&] {
      graph->replay();
      loss_val = graph_out.item<double>();
    };
  }
  qk::reset_peak_memory(dev);
  qk::Timer t;
  for (int i = 0; i < steps; ++i) step();
  double s = t.seconds();
  const std::string impl =
      fmt::format("{}{}{}{}{}", amp == "bf16" ? "qianka-bf16" : "qianka", dev.is_cpu() ? "" : "-",
                  dev.is_cpu() ? "" : dev.str(), cuda_graph ? "-graph" : "", channels_last ? "-cl" : "");
  fmt::print("{{\"impl\": \"{}\", \"model\": \"{}\", \"mode\": \"{}\", \"optimizer\": \"{}\", \"threads\": {}, "
             "\"batch\": {}, \"images_per_s\": {:.1f}, \"ms_per_step\": {:.3f}, \"peak_rss_mb\": {:.1f}, "
             "\"peak_tensor_mb\": {:.1f}, \"loss\": {:.4f}}}\n",
             impl, model, mode, mode == "train" ? optimizer : "none", threads, batch, steps * batch / s, 1e3 * s / steps,
             qk::peak_rss_bytes() / 1048576.0, qk::memory_stats(dev).peak_allocated / 1048576.0, loss_val);
  return 0;
}
