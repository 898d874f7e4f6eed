// The CIFAR-10 trainer behind `qk train cifar10` (the seed's train_cifar10.py):
// epochs over the shuffled training set, built on the training-loop library
// (qk/train: StepRunner and checkpoints; qk/optim's MixedPrecisionOptimizer).
//
//   qk::recipes::TrainCifarOptions o;
//   o.model = "simple_cnn"; o.epochs = 5; o.out = "runs/cifar10";
//   qk::recipes::train_cifar10(o);   // prints the run's lines to stdout
//
//   // or stage by stage, as train_cifar10 runs them:
//   qk::recipes::Cifar10Training run(o);
//   run.initialize();                  // options, threads, the job, the data set
//   run.setup_model_and_optimizer();   // model, optimizer, --resume, DDP
//   run.build_data_loader();           // the shuffled loader, at the resumed batch
//   run.train();                       // the epochs: evaluation, log lines, checkpoints
//   run.finish();                      // the summary and training_curves.png
//
// Writes, under o.out:
//   checkpoints/step-NNNNNNNNNN/     resumable checkpoint (model, optimizer by
//                                    parameter name, state; checksummed manifest;
//                                    see qk/train/checkpoint.h)
//                                    at each epoch's end and every checkpoint_every
//                                    steps; the newest keep_checkpoints stay
//   checkpoints/latest.safetensors   weights after the last finished epoch
//   checkpoints/latest.optim.safetensors   the optimizer state (moments, steps)
//   checkpoints/latest.json          sidecar: epoch, model, metrics history,
//                                    optimizer file, RNG state, data seed
//   checkpoints/best.*               the same for the best validation accuracy
//   training_curves.png              loss and accuracy, train vs validation
// Every file is written to a temporary name and renamed; the sidecar is
// written last, so it never points at a newer or half-written weights file.
// A step folder is written under a temporary name, fsynced and renamed whole.
//
// Resuming (o.resume = "auto": the newest step folder that passes its
// checksums, skipping corrupt ones with a warning; or a folder / sidecar /
// weights path) restores weights, optimizer, loss scaler, the default
// generator (dropout), the history and the position inside the epoch, and
// continues with the same numbering. Checkpoints are format
// qk-cifar10-checkpoint-v2 (qk/train's JSON with this trainer's state under
// "user"); v1, written before the trainer moved onto qk/train, still resumes.
// The batches of epoch e depend only on (data seed, e) (see
// qk/data/loader.h) and a resumed epoch starts at the checkpoint's batch,
// so with the same seed, ranks and threads a run killed
// and resumed (any number of times) ends with the weights of an
// uninterrupted run, bit for bit (tests/cli/train_resume_test.cc).
//
// Under `qk run` (or mpirun/srun: WORLD_SIZE > 1) it trains data-parallel:
// each rank reads its shard (DistributedSampler), batch_size is per rank,
// DDP averages the gradients (buckets overlapping backward), rank 0
// evaluates, logs and writes the checkpoints. amp = "bf16" or "fp16" runs
// the forward under autocast (fp16 with torch's loss scaling: 65536,
// growth x2 every 2000 clean steps, x0.5 on inf/NaN, which skips the step).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "qk/nn/module.h"
#include "qk/optim/mixed_precision_optimizer.h"

namespace qk::recipes {

struct TrainCifarOptions {
  std::string model = "simple_cnn";
  int epochs = 5;
  int64_t batch_size = 64;          // per rank
  int64_t global_batch_size = 0;    // > 0: over all ranks (must divide by them); overrides batch_size
  double lr = 1e-3;
  std::string optimizer = "adam";  // adam | sgd
  double momentum = 0.9;           // sgd only
  double weight_decay = 0;
  bool augment = false;
  uint64_t seed = 42;              // model init, dropout, shuffling, augmentation
  std::string data_dir = "data";
  std::string out = "runs/cifar10";
  int threads = 0;                 // 0: leave the default
  int num_workers = 2;             // data loader threads
  std::string resume;              // "", "auto", or a checkpoint folder / sidecar path
  int64_t checkpoint_every = 0;    // also checkpoint every N optimizer steps (0: epoch ends only)
  int keep_checkpoints = 3;        // resumable checkpoint folders kept
  bool async_save = false;         // write the step checkpoints in the background (train::AsyncCheckpointSaver)
  int64_t synth_train = 10000;     // size of the synthetic set written when data_dir is empty
  int64_t synth_test = 2000;
  bool progress = true;            // live bar (only when stdout is a terminal)
  std::string amp = "off";         // off | bf16 | fp16
  // Each step's forward and backward recorded as a CUDA graph after two
  // eager steps and replayed (one rank).
  bool cuda_graph = false;
  bool channels_last = false;      // activations stored NHWC (models::use_channels_last)
  double bucket_cap_mb = 25;       // DDP bucket size (distributed runs)
  std::string grad_compress = "none";  // none | bf16 | fp16: DDP gradients on the wire
  bool sync_bn = false;            // BatchNorm statistics over every rank (distributed runs)
  std::string device = "cpu";      // cpu, cuda, cuda:N: where the model and each batch live
};

// Runs the stages of Cifar10Training in order.
void train_cifar10(const TrainCifarOptions& o);

// The run in stages, each once and in order (one called out of order throws
// qk::Error naming the one missing). Not copyable or movable: what a stage
// built stays where it is.
class Cifar10Training {
 public:
  explicit Cifar10Training(TrainCifarOptions o);
  ~Cifar10Training();
  Cifar10Training(const Cifar10Training&) = delete;
  Cifar10Training& operator=(const Cifar10Training&) = delete;

  // Checks the options (ValueError naming the flag), sets the threads,
  // joins the job under qk run (and leaves it again when this object goes,
  // if it joined), opens the data set (rank 0 writes a synthetic one when
  // there is none).
  void initialize();
  // Builds the model on the device, the mixed-precision optimizer (loss
  // scaling under fp16), resumes from o.resume, checks every rank stands at
  // the same step, wraps the model in DDP (and SyncBatchNorm) under qk run.
  void setup_model_and_optimizer();
  // The shuffled, sharded loader at the resumed epoch's batch; prints the
  // run's description on rank 0.
  void build_data_loader();
  // The remaining epochs: training steps, evaluation and a log line per
  // epoch on rank 0, checkpoints at each epoch's end and every
  // o.checkpoint_every steps.
  void train();
  // Rank 0: the summary lines and training_curves.png.
  void finish();

  nn::Module& model();                         // after setup_model_and_optimizer
  optim::MixedPrecisionOptimizer& optimizer();  // after setup_model_and_optimizer
  int epochs_done() const;                     // epochs finished so far (resumed ones included)
  double best_val_acc() const;                 // rank 0: the best validation accuracy (-1: none yet)

 private:
  struct State;
  void require(int stage, const char* caller) const;
  void run_epoch(int epoch);
  std::unique_ptr<State> s_;
};

}  // namespace qk::recipes
