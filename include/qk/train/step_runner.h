// One training iteration as Megatron-LM runs it: a global batch split into
// micro-batches, forward and backward for each through a callback, the
// gradients reduced over data-parallel ranks once, then the optimizer.
//
//   const int64_t k = qk::train::num_microbatches(/*global=*/64, /*micro=*/4, dp.size());
//   qk::train::StepRunner runner(opt, dp, {.num_microbatches = k, .autocast = qk::DType::bf16});
//   auto stats = runner.step([&](int64_t micro) {
//     Batch b = next_batch();                     // this rank's micro-batch
//     Tensor loss = model->forward(b.tokens, {}, b.labels, b.loss_mask);
//     return qk::train::MicroBatchOutput{loss, {{"lm loss", {loss.item<float>(), 1}}}};
//   });
//   stats.metrics["lm loss"];  stats.grad_norm;  stats.skipped;
//
// Each micro-batch's loss is divided by num_microbatches (Megatron's
// schedules) and multiplied by the loss scale before backward. With a DDP
// wrapper, every micro-batch but the last runs under no_sync(), so the
// gradients are all-reduced once (overlapping the last backward); with a
// process group and no DDP, the optimizer's fp32 gradients are averaged in
// one all-reduce after the last backward (Megatron's default, and the only
// way with accumulate_allreduce_grads_in_fp32). Metrics are (sum, count)
// pairs: the step reports sum / count over micro-batches and ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "qk/base/timer.h"
#include "qk/dist/ddp.h"
#include "qk/dist/process_group.h"
#include "qk/optim/optimizer_param_scheduler.h"
#include "qk/optim/mixed_precision_optimizer.h"
#include "qk/tensor/backend.h"

namespace qk::train {

// global_batch_size / (micro_batch_size * data_parallel_size), with
// Megatron's error when it does not divide.
int64_t num_microbatches(int64_t global_batch_size, int64_t micro_batch_size, int64_t data_parallel_size);

// A metric's sum and count over a step's micro-batches. device_sum, a
// scalar tensor on the model's device, is added to sum when the step reads
// its metrics back: once per step for every metric and micro-batch, so a
// forward step on a GPU need not wait for its loss (loss.item() would stall
// the host once per micro-batch).
struct Metric {
  Metric() = default;
  Metric(double sum_, double count_, Tensor device_sum_ = {})
      : sum(sum_), count(count_), device_sum(std::move(device_sum_)) {}
  double sum = 0;
  double count = 0;
  Tensor device_sum;  // undefined: none
};

struct MicroBatchOutput {
  Tensor loss;                            // scalar to differentiate (this micro-batch's mean)
  std::map<std::string, Metric> metrics;  // none: {"loss": {loss, 1}} is recorded (on the loss's device)
};

// Called with the micro-batch's index in the step (0..num_microbatches-1).
using ForwardStep = std::function<MicroBatchOutput(int64_t microbatch)>;

// A step whose forward and backward passes run as a device graph (CUDA
// graphs, as Megatron's --enable-cuda-graph and torch.compile's
// reduce-overhead mode): every micro-batch's forward, backward and gradient
// accumulation are recorded once and replayed each step with one launch;
// the optimizer step and the metrics' read-back stay as they are. The host
// code in `forward` runs only at the capture, so it must read its inputs
// from the same device tensors every step, which `load` fills.
struct GraphedForwardStep {
  Device device;  // where the graph runs (a device whose backend records graphs: cuda)
  // Host work for micro-batch i before the step's device work: fetch it and
  // copy it into the tensors `forward` reads. Returns the micro-batch's
  // metrics' host parts (sum, count by name), which replace those `forward`
  // returned at the capture (a token count that varies by batch).
  std::function<std::map<std::string, Metric>(int64_t microbatch)> load;
  // Device work only: no host reads of device values, no host data.
  ForwardStep forward;
};

// The data-parallel group, if any, and the model's DDP wrapper, if any.
struct DataParallel {
  dist::ProcessGroup* group = nullptr;
  dist::DistributedDataParallel* ddp = nullptr;
  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank() : 0; }
};

struct StepRunnerOptions {
  int64_t num_microbatches = 1;
  std::optional<DType> autocast{};  // run each forward under autocast to this dtype
  bool reduce_metrics = true;     // average metrics over ranks (one small all-reduce per step)
  // Graphed steps (step(GraphedForwardStep)): eager steps before the capture,
  // so the capture finds the optimizer's state, the plan caches and the
  // allocator's pools warm (PyTorch's side-stream warm-up).
  int64_t graph_warmup_steps = 2;
};

struct StepStats {
  std::map<std::string, double> metrics;  // sum / count over micro-batches (and ranks)
  double loss = 0;                        // metrics["loss"] when present, else the first metric
  bool skipped = false;                   // inf/NaN gradients: no update
  bool nan = false;                       // skipped and some metric was inf/NaN
  double grad_norm = 0;                   // NaN when skipped
  int64_t num_zeros_in_grad = -1;
  float loss_scale = 1;                   // after this step's update of the scaler
  double lr = 0;                          // the first group's rate this update used
  double seconds = 0;
  double comm_wait_ms = 0;                // DDP: waiting for the all-reduce after backward
};

class StepRunner {
 public:
  StepRunner(optim::MixedPrecisionOptimizer& opt, DataParallel dp = {}, StepRunnerOptions o = {});
  // The schedule advanced by `increment` steps after each successful update
  // (Megatron: the global batch size in samples).
  void set_scheduler(optim::OptimizerParamScheduler* scheduler, int64_t increment);

  // Drops a graph recorded by step(GraphedForwardStep) (the next graphed
  // step records one again).
  StepStats step(const ForwardStep& forward_step);
  // The same with the micro-batches' device work as a graph: the first
  // graph_warmup_steps calls run eagerly, the next captures, the rest
  // replay (a new capture when the loss scale changes). One data-parallel
  // rank only: the gradients' all-reduce is host-driven (ValueError).
  // Whatever forward does that a graph cannot record (a host read of a
  // device value, dropout's fresh random numbers) raises DeviceError at the
  // capture, naming it.
  StepStats step(const GraphedForwardStep& graphed);
  // Kernels and copies in the current graph (0: none yet).
  int64_t graph_nodes() const;
  // Forward only, without gradients, over `microbatches` micro-batches;
  // metrics as in step(). The caller switches the model to eval().
  std::map<std::string, double> forward_only(const ForwardStep& forward_step, int64_t microbatches);

  const StepRunnerOptions& options() const { return o_; }
  const DataParallel& data_parallel() const { return dp_; }
  optim::MixedPrecisionOptimizer& optimizer() { return opt_; }

 private:
  std::map<std::string, double> reduce(std::map<std::string, Metric>& m) const;
  // The micro-batches' forward and backward, with metrics summed.
  std::map<std::string, Metric> run_microbatches(const ForwardStep& forward_step);
  // After the micro-batches: gradient sync, the optimizer, the metrics.
  StepStats finish_step(std::map<std::string, Metric>& sums, const Timer& timer);
  optim::MixedPrecisionOptimizer& opt_;
  DataParallel dp_;
  StepRunnerOptions o_;
  optim::OptimizerParamScheduler* sched_ = nullptr;
  int64_t increment_ = 0;
  // Graphed steps: calls so far, the graph, the loss scale it was recorded
  // with and the metrics it computes (their device sums are its memory).
  int64_t graphed_calls_ = 0;
  std::unique_ptr<DeviceGraph> graph_;
  float graph_scale_ = 0;
  std::map<std::string, Metric> graph_sums_;
};

}  // namespace qk::train
