// Batches of normalised (and optionally augmented) images, built by
// background threads ahead of the training loop.
//
//   auto d = qk::data::load_cifar10("data");
//   auto train = std::make_shared<qk::data::ImageDataset>(d.train);
//   qk::data::DataLoaderOptions o;
//   o.batch_size = 64; o.shuffle = true; o.num_workers = 2; o.seed = 42;
//   o.transform.augment(true);
//   qk::data::DataLoader loader(train, o);
//   for (int epoch = 0; epoch < 10; ++epoch) {
//     loader.set_epoch(epoch);                 // reshuffles, redraws the augmentation
//     for (const qk::data::Batch& b : loader) {
//       b.images;   // f32 [B, 3, 32, 32], in [-1, 1] with the default mean/std
//       b.labels;   // i64 [B]
//     }
//   }
//
// Resuming mid-epoch after a checkpoint: loader.set_epoch(e);
// loader.set_start_batch(k); the next pass yields batches k, k+1, ... of
// epoch e, identical to those an uninterrupted run would have produced.
//
// Determinism: the batches depend only on (dataset, options, epoch): which
// samples come from the sampler (seed + epoch), each sample's augmentation
// from (seed, epoch, index) (Note [augmentation randomness] in
// transforms.h). The number of workers only changes how fast they come.
//
// Threads: with num_workers = 0 each batch is built by the caller inside
// next(). With num_workers = W, W threads build batches in order of batch
// number, at most W * prefetch_factor batches ahead of the consumer; next()
// returns them in order. An exception in a worker (a bad image, out of
// memory) is rethrown by next() at the batch it belongs to. Starting another
// pass or destroying the loader stops and joins the workers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "qk/data/dataset.h"
#include "qk/data/sampler.h"
#include "qk/data/transforms.h"
#include "qk/tensor/tensor.h"

namespace qk::data {

struct Batch {
  Tensor images;      // f32 [B, C, H, W]
  Tensor labels;      // i64 [B]
  int64_t index = 0;  // batch number within the epoch
};

struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;
  bool drop_last = false;    // drop the last, smaller batch
  int num_workers = 0;       // background threads; 0: build batches in next()
  int prefetch_factor = 2;   // batches in flight per worker (PyTorch's default; not measured)
  uint64_t seed = 0;         // shuffling (seed + epoch) and augmentation
  int64_t num_replicas = 1;  // data-parallel world size: see DistributedSampler
  int64_t rank = 0;
  TransformOptions transform;  // its seed is replaced by `seed`
  // Runs on the thread that built the batch, after it is built (a cast, a
  // device copy, a check). An exception it throws surfaces in next().
  std::function<void(Batch&)> on_batch;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const ImageDataset> dataset, const DataLoaderOptions& options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The epoch the next pass reads (reshuffles, redraws augmentation).
  void set_epoch(uint64_t epoch);
  uint64_t epoch() const { return sampler_.epoch(); }
  // The next pass starts at this batch (for resuming); applies to one pass.
  void set_start_batch(int64_t batch);
  // Batches per epoch for this rank.
  int64_t num_batches() const;
  // Samples per epoch for this rank (before drop_last).
  int64_t num_samples() const { return sampler_.num_samples(); }
  const DataLoaderOptions& options() const { return o_; }
  const ImageDataset& dataset() const { return *ds_; }

  // Starts a pass over the current epoch (from the start batch); stops any
  // pass in progress.
  void start();
  // The next batch of the pass, or nullopt at its end.
  std::optional<Batch> next();

  // Builds batch `b` of the current epoch directly (no threads); for tests
  // and for evaluation code that wants one batch.
  Batch build_batch(int64_t b) const;

  class Iterator {
   public:
    Iterator(DataLoader* l, std::optional<Batch> b) : l_(l), b_(std::move(b)) {}
    const Batch& operator*() const { return *b_; }
    const Batch* operator->() const { return &*b_; }
    Iterator& operator++() {
      b_ = l_->next();
      return *this;
    }
    bool operator!=(const Iterator& o) const { return b_.has_value() != o.b_.has_value(); }

   private:
    DataLoader* l_;
    std::optional<Batch> b_;
  };
  // begin() starts a pass (see start()); one pass at a time.
  Iterator begin() {
    start();
    return Iterator(this, next());
  }
  Iterator end() { return Iterator(this, std::nullopt); }

 private:
  void stop_workers();
  void worker_loop();

  std::shared_ptr<const ImageDataset> ds_;
  DataLoaderOptions o_;
  DistributedSampler sampler_;
  ImageTransform transform_;
  int64_t start_batch_ = 0;

  // The current pass. Workers claim batch numbers in order from next_claim_;
  // a claim waits until it is within the prefetch window of next_yield_.
  std::vector<int64_t> order_;  // this rank's sample indices for the epoch
  uint64_t pass_epoch_ = 0;
  int64_t end_batch_ = 0;
  int64_t next_yield_ = 0;
  int64_t next_claim_ = 0;
  bool stopping_ = false;
  bool active_ = false;  // a pass is in progress
  std::map<int64_t, Batch> ready_;
  std::map<int64_t, std::exception_ptr> failed_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_ready_;
  std::vector<std::thread> workers_;
};

}  // namespace qk::data
