// The smallest CIFAR-10 training run the trainer tests use: one synthetic
// set of 48 + 16 images, batch 16, no loader threads, no progress bar.
#pragma once

#include <string>

#include "qk/recipes/cifar10_trainer.h"

namespace qk::test {

inline recipes::TrainCifarOptions tiny_cifar(const std::string& data, const std::string& out, int epochs) {
  recipes::TrainCifarOptions o;
  o.data_dir = data;
  o.out = out;
  o.epochs = epochs;
  o.batch_size = 16;
  o.synth_train = 48;
  o.synth_test = 16;
  o.num_workers = 0;
  o.progress = false;
  o.seed = 5;
  return o;
}

}  // namespace qk::test
