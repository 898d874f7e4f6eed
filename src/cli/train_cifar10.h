// The training loop behind `qk train cifar10` (the seed's train_cifar10.py).
//
//   TrainCifarOptions o;
//   o.model = "simple_cnn"; o.epochs = 5; o.out = "runs/cifar10";
//   train_cifar10(o);
//
// Writes, under o.out:
//   checkpoints/latest.safetensors   weights after the last finished epoch
//   checkpoints/latest.optim.safetensors   the optimizer state (moments, steps)
//   checkpoints/latest.json          sidecar: epoch, model, metrics history,
//                                    optimizer file, RNG state, data seed
//   checkpoints/best.*               the same for the best validation accuracy
//   training_curves.png              loss and accuracy, train vs validation
// Every file is written to a temporary name and renamed; the sidecar is
// written last, so it never points at a newer or half-written weights file.
//
// Resuming (o.resume = "auto" or a sidecar / weights path) restores weights,
// optimizer, the default generator (dropout) and the history, and continues
// at the next epoch with the same numbering. The batches of epoch e depend
// only on (data seed, e) (see qk/data/loader.h), so the data order of a
// resumed run is the one an uninterrupted run would have seen.
//
// Under `qk run` (or mpirun/srun: WORLD_SIZE > 1) it trains data-parallel:
// each rank reads its shard (DistributedSampler), batch_size is per rank,
// DDP averages the gradients (buckets overlapping backward), rank 0
// evaluates, logs and writes the checkpoints. amp = "bf16" or "fp16" runs
// the forward under autocast (fp16 with a GradScaler).
#pragma once

#include <cstdint>
#include <string>

namespace qk::cli {

struct TrainCifarOptions {
  std::string model = "simple_cnn";
  int epochs = 5;
  int64_t batch_size = 64;
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
  std::string resume;              // "", "auto", or a checkpoint path
  int64_t synth_train = 10000;     // size of the synthetic set written when data_dir is empty
  int64_t synth_test = 2000;
  bool progress = true;            // live bar (only when stdout is a terminal)
  std::string amp = "off";         // off | bf16 | fp16
  double bucket_cap_mb = 25;       // DDP bucket size (distributed runs)
  std::string grad_compress = "none";  // none | bf16 | fp16: DDP gradients on the wire
};

void train_cifar10(const TrainCifarOptions& o);

}  // namespace qk::cli
