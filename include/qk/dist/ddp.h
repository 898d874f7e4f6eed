// DistributedDataParallel: gradients averaged across ranks while backward
// is still running, as torch.nn.parallel.DistributedDataParallel does it.
//
//   qk::dist::init();
//   auto model = qk::models::SimpleCNN();
//   qk::dist::DistributedDataParallel ddp(model.ptr(), qk::dist::group(),
//                                         {.bucket_cap_mb = 25});
//   for (...) {
//     ddp.prepare_forward();                 // BatchNorm buffers from rank 0
//     Tensor loss = cross_entropy(model(x), y);
//     loss.backward();                       // buckets all-reduce as grads become ready
//     opt.step();                            // .grad holds the average over ranks
//   }
//
// At construction the model's structure is compared across ranks (a hash of
// every parameter's name, shape and dtype; a mismatch names the ranks) and
// rank 0's parameters and buffers are broadcast. Parameters are laid into
// buckets in reverse registration order (roughly the order backward makes
// their gradients ready); the first bucket holds at most first_bucket_mb, the
// others bucket_cap_mb. A gradient-ready hook copies each gradient into its
// bucket; a full bucket is all-reduced asynchronously on qccl's progress
// thread, buckets always in index order so every rank issues the same
// collectives in the same order. When backward ends (an engine callback),
// buckets not yet launched (a parameter without a gradient this step is
// counted as zero) are launched, all are awaited and the averages copied
// back into .grad.
//
// With compress = bf16 or f16, each bucket travels in that type (half the
// bytes; qccl accumulates in f32) and is widened back on arrival.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qk/dist/process_group.h"
#include "qk/nn/module.h"

namespace qk::dist {

struct DDPOptions {
  double bucket_cap_mb = 25.0;   // PyTorch DDP's default; not measured here
  double first_bucket_mb = 1.0;  // PyTorch's _DEFAULT_FIRST_BUCKET_BYTES
  bool broadcast_buffers = true;  // prepare_forward() broadcasts rank 0's buffers
  std::optional<DType> compress;  // bf16 or f16 on the wire; none: the gradients' dtype
};

// What one step did, for tests and the trainer's per-step log.
struct DDPStepStats {
  using Clock = std::chrono::steady_clock;
  Clock::time_point first_launch;       // first bucket's all-reduce submitted
  Clock::time_point backward_end;       // the engine's end-of-backward callback
  int buckets_launched_in_backward = 0; // launched by hooks (overlapping backward)
  int buckets = 0;
  double wait_ms = 0;                   // time spent waiting for comms after backward
  int64_t wire_bytes = 0;               // bytes all-reduced (per rank, payload)
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, ProcessGroup& pg,
                          DDPOptions opts = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Before each forward: broadcasts rank 0's buffers (BatchNorm running
  // stats) when broadcast_buffers is set.
  void prepare_forward();

  // While a NoSync lives, backward only accumulates local gradients (gradient
  // accumulation); the first backward after it averages the accumulated sums.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& d) : d_(d), prev_(d.sync_) { d_.sync_ = false; }
    ~NoSync() { d_.sync_ = prev_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& d_;
    bool prev_;
  };
  NoSync no_sync() { return NoSync(*this); }

  nn::Module& module() { return *module_; }
  size_t num_buckets() const;
  // Parameter indices (into module().parameters()) of each bucket, in order.
  std::vector<std::vector<size_t>> bucket_layout() const;
  const DDPStepStats& last_step() const;

  struct Reducer;  // defined in ddp.cc

 private:
  std::shared_ptr<nn::Module> module_;
  ProcessGroup& pg_;
  DDPOptions opts_;
  bool sync_ = true;
  std::shared_ptr<Reducer> reducer_;  // hooks hold a weak_ptr: dead after ~DDP
};

// Fails (ValueError naming the ranks) unless every rank's model has the same
// parameter and buffer names, shapes and dtypes. Collective.
void check_same_model(const nn::Module& m, ProcessGroup& pg);

}  // namespace qk::dist
