// CIFAR-10 pieces shared by the trainer (cifar10_trainer.h) and `qk infer
// cifar10`: the model factory, the data folder (with the synthetic fallback),
// evaluation and the checked checkpoint load.
//
//   CifarModel m = make_cifar_model("simple_cnn");
//   load_cifar_weights(m, "out/checkpoints/best.safetensors");  // names model and keys on mismatch
//   EvalResult r = evaluate_cifar(m, test_split, /*batch=*/256);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qk/data/cifar10.h"
#include "qk/nn/module.h"
#include "qk/tensor/tensor.h"

namespace qk::models {

inline constexpr const char* kCifarModelNames = "simple_cnn|simple_resnet";
// The batch size of every evaluation pass (trainer and infer alike), so the
// accuracy infer reports is computed exactly as the trainer computed it.
inline constexpr int64_t kCifarEvalBatch = 256;

struct CifarModel {
  std::string name;                            // "simple_cnn" or "simple_resnet"
  std::shared_ptr<nn::Module> module;          // for parameters, state, train/eval
  std::function<Tensor(const Tensor&)> forward;  // [N,3,32,32] f32 -> [N,10] logits
};

// Builds a freshly initialised model (from the default generator); throws
// ValueError for an unknown name.
CifarModel make_cifar_model(const std::string& name);
// Runs m channels last from now on (PyTorch's model and input
// .to(memory_format=torch.channels_last)): forward converts each batch of
// images to the format (differentiably) and every activation stays in it
// (qk/tensor/ops/memory_format.h); the weights keep their layout. On a GPU
// cuDNN then runs its NHWC convolutions.
void use_channels_last(CifarModel& m);
int64_t count_parameters(const nn::Module& m);
// Where the model's parameters live (the CPU for a model without any).
Device model_device(const CifarModel& m);
// A --device flag ("cpu", "cuda", "cuda:N", ...) as a device this program
// has and this machine shows; ValueError naming the flag and why otherwise.
// A device type without an index ("cuda") means the process's local rank's
// device, as torchrun's LOCAL_RANK: cuda:0 for a single process, cuda:3 for
// local rank 3 of `qk run --nproc-per-node 8`.
Device usable_device(const std::string& flag, int local_rank = 0);

// Loads `data_dir` if it holds CIFAR-10; otherwise, when allow_synth, writes
// the synthetic set there first (logged as SYNTHETIC) and loads that.
data::Cifar10 open_cifar10(const std::string& data_dir, bool allow_synth, int64_t synth_train,
                           int64_t synth_test, uint64_t synth_seed);

struct EvalResult {
  double loss = 0;       // mean cross-entropy
  double accuracy = 0;   // fraction correct, 0..1
  int64_t correct = 0, total = 0;
  std::vector<int64_t> predicted;   // per sample (when asked for)
  std::vector<float> confidence;    // softmax probability of the prediction
};

// Runs the model in eval mode without gradients over the split, in batches of
// kCifarEvalBatch, normalised as in training (mean = std = 0.5).
EvalResult evaluate_cifar(const CifarModel& m, const data::Cifar10Split& split, bool keep_predictions = false);

// Loads weights with a clear error when the file is missing or was written
// for another model (names the model in the file and the mismatched keys).
void load_cifar_weights(const CifarModel& m, const std::string& path);

}  // namespace qk::models
