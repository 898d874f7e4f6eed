// Inference and benchmarking behind `qk infer cifar10` (the seed's
// inference.py): latency, throughput against batch size, peak memory,
// accuracy per class with a confusion matrix, and a picture of predictions.
//
//   InferCifarOptions o;
//   o.model = "simple_cnn"; o.checkpoint = "runs/cifar10/checkpoints/best.safetensors";
//   o.benchmark = o.visualize = true;
//   infer_cifar10(o);
//
// The accuracy is computed by the same evaluation pass as the trainer's
// validation (qk/models/cifar10.h), so for the checkpoint of an epoch it equals
// that epoch's validation accuracy exactly.
#pragma once

#include <string>

namespace qk::cli {

struct InferCifarOptions {
  std::string model = "simple_cnn";
  std::string checkpoint = "runs/cifar10/checkpoints/best.safetensors";
  std::string data_dir = "data";
  std::string out = ".";       // where inference_results.png goes
  bool benchmark = false;      // the full batch-size table (1, 2, 4, ..., 256), longer timings
  bool visualize = false;      // write OUT/inference_results.png
  int threads = 0;             // 0: leave the default
  int grid = 16;               // images in the picture
  std::string device = "cpu";  // cpu, cuda, cuda:N
};

void infer_cifar10(const InferCifarOptions& o);

}  // namespace qk::cli
