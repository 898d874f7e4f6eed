// Megatron's pipeline schedules (megatron/core/pipeline_parallel/schedules.py):
// forward-only (evaluation), 1F1B (warm-up, steady 1F1B, cool-down) and
// interleaved 1F1B over model chunks (virtual stages). A schedule knows no
// model: it calls a forward-step callback per (chunk, micro-batch), runs the
// backward through autograd (or a backward callback), and moves activations
// and their gradients point to point between adjacent pipeline stages.
//
//   auto pp = ps->group(qk::parallel::GroupKind::pp);
//   qk::parallel::PipelineSchedule schedule(*pp);              // collective over pp, once
//   qk::parallel::PipelineScheduleOptions o;
//   o.num_microbatches = global_batch / (micro_batch * dp_size);
//   o.tensor_shape = {micro_batch, seq_length / (sp ? tp : 1), hidden};   // what stages exchange
//   o.num_model_chunks = split.virtual_pipeline_size();
//   o.loss_scale = opt.loss_scale();
//   auto r = schedule.run([&](int chunk, int64_t micro, const qk::Tensor& input) {
//     // input: the previous stage's activation (undefined on the first stage)
//     qk::Tensor out = chunks[chunk]->forward(...);           // activation, or the loss on the last stage
//     return qk::parallel::ForwardStepResult{out, {{"lm loss", {loss_value * tokens, tokens}}}};
//   }, o);
//   r.metrics;   // the last stage's sums over the micro-batches (empty on the others:
//                // broadcast_from_last_stage for logging)
//
// Semantics as Megatron: each micro-batch's loss is divided by the number of
// micro-batches and multiplied by the loss scale before its backward, so the
// gradients are the mean over the global batch (times the scale), as with
// qk::train::StepRunner; gradients accumulate into .grad over micro-batches.
// The interleaved schedule needs num_microbatches to be a multiple of the
// pipeline size (Megatron's microbatch_group_size_per_vp_stage = p).
//
// Communication: activations travel on one communicator split from pp,
// their gradients on another, so the k-th tensor one stage sends another in
// each direction is the k-th it receives, whatever the batching. Without
// overlap each exchange is waited on where Megatron's is; with
// overlap_p2p_comm (--overlap-p2p-communication, interleaved schedule) the
// receives are posted right after the forward (backward) that precedes them
// and waited on only when the next forward (backward) needs the tensor, so
// they run during the other computation. Every wait has qccl's deadline: a
// dead peer fails the step with a TimeoutError / IoError naming the stage
// and global rank that did not answer.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qk/dist/process_group.h"
#include "qk/parallel/timeline.h"
#include "qk/tensor/tensor.h"

namespace qk::parallel {

struct MetricSum {
  double sum = 0;
  double count = 0;
};
using StepMetrics = std::map<std::string, MetricSum>;

struct ForwardStepResult {
  // The stage's output activation (tensor_shape), or on the last stage the
  // micro-batch's scalar loss.
  Tensor output;
  // Last stage: what to report (none: {"loss": {loss, 1}}); ignored elsewhere.
  StepMetrics metrics;
};
// chunk: the model chunk (virtual stage) of this rank, 0-based; microbatch:
// 0..num_microbatches-1 within the step; input: the activation received from
// the previous stage, a leaf that requires grad (undefined on the first stage).
using ForwardStepFn = std::function<ForwardStepResult(int chunk, int64_t microbatch, const Tensor& input)>;
// Backward of one micro-batch: from output (the loss, already divided and
// scaled, on the last stage; output_grad undefined there) to the gradient of
// input (undefined on the first stage). The default runs autograd.
using BackwardStepFn = std::function<Tensor(const Tensor& input, const Tensor& output, const Tensor& output_grad)>;
Tensor autograd_backward_step(const Tensor& input, const Tensor& output, const Tensor& output_grad);

struct PipelineScheduleOptions {
  int64_t num_microbatches = 1;
  // The activation every stage sends the next: [micro batch, sequence, hidden]
  // ([micro batch, sequence / tp, hidden] under sequence parallelism).
  Shape tensor_shape;
  DType dtype = DType::f32;
  Device device = kCPU;  // where received activations and gradients are put (the model's device)
  // Model chunks on each rank (Megatron's virtual pipeline size); > 1: interleaved.
  int num_model_chunks = 1;
  bool forward_only = false;  // evaluation: no backward, no gradients kept
  // --overlap-p2p-communication (interleaved schedule; 1F1B ignores it, as Megatron).
  bool overlap_p2p_comm = false;
  double loss_scale = 1.0;       // multiplies each loss before its backward
  Timeline* timeline = nullptr;  // forward, backward, send and recv spans
  BackwardStepFn backward_step;  // null: autograd_backward_step
  // Called right before each backward with its chunk and micro-batch (each
  // chunk's micro-batches go backward in order 0..m-1): where an overlapped
  // gradient reduction learns that m-1, the chunk's last, is under way
  // (Megatron's no_sync / enable_grad_sync). Null: nothing.
  std::function<void(int chunk, int64_t microbatch)> before_backward;
};

struct PipelineScheduleResult {
  StepMetrics metrics;  // sums over the micro-batches, on the last stage only
  int64_t num_microbatches = 0;
};

// Megatron's constraints, as ValueErrors naming the flags: at least one
// micro-batch; interleaving needs a multiple of the pipeline size.
void check_pipeline_microbatches(int64_t num_microbatches, int pipeline_size, int num_model_chunks);

class PipelineSchedule {
 public:
  // Collective over pp (every stage, once): the activation and gradient
  // communicators. A pipeline of one stage runs Megatron's
  // forward_backward_no_pipelining and communicates nothing.
  explicit PipelineSchedule(dist::ProcessGroup& pp);
  ~PipelineSchedule();
  PipelineSchedule(const PipelineSchedule&) = delete;
  PipelineSchedule& operator=(const PipelineSchedule&) = delete;

  // One step over num_microbatches micro-batches: forward-only, 1F1B, or
  // interleaved 1F1B (num_model_chunks > 1). Every stage calls it with the
  // same options.
  PipelineScheduleResult run(const ForwardStepFn& forward_step, const PipelineScheduleOptions& options);

  int stage() const { return rank_; }
  int num_stages() const { return size_; }
  // The communicators activations and their gradients travel on (empty for
  // one stage): what a traffic meter counts as the pipeline's p2p bytes.
  std::vector<dist::ProcessGroup*> p2p_groups() const;

 private:
  int rank_ = 0, size_ = 1;
  std::vector<int> global_ranks_;
  std::unique_ptr<dist::ProcessGroup> act_, grad_;
};

// Collective over pp: the last stage's metrics on every stage, for logging
// (Megatron prints from the last rank; this lets any rank print).
StepMetrics broadcast_from_last_stage(const StepMetrics& metrics, dist::ProcessGroup& pp);

}  // namespace qk::parallel
