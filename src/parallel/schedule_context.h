// What the schedule loops share: the callbacks, the options, the p2p
// batches, and the forward/backward of one (chunk, micro-batch) with its
// spans, metrics and loss scaling.
#pragma once

#include "qk/parallel/pipeline_schedule.h"
#include "stage_p2p.h"

namespace qk::parallel {

struct ScheduleContext {
  const ForwardStepFn& forward_step;
  const PipelineScheduleOptions& options;
  StageP2P& p2p;
  StepMetrics metrics;

  Timeline* timeline() const { return options.timeline; }
  int chunks() const { return options.num_model_chunks; }
  // Megatron's pre_process / post_process of this rank's chunk.
  bool first_stage(int chunk) const { return p2p.is_first() && chunk == 0; }
  bool last_stage(int chunk) const { return p2p.is_last() && chunk == chunks() - 1; }

  // forward_step; on the last stage also the metrics, and the loss returned
  // divided by the number of micro-batches and multiplied by the loss scale.
  Tensor forward(int chunk, int64_t microbatch, const Tensor& input);
  // The input's gradient (undefined on the first stage).
  Tensor backward(int chunk, int64_t microbatch, const Tensor& input, const Tensor& output, const Tensor& output_grad);
  std::string span_name(char kind, int chunk, int64_t microbatch) const;
  // A received activation as the forward's input: a leaf that requires grad (training).
  Tensor as_input(Tensor received) const;
};

// Megatron's forward_backward_no_pipelining (one stage) and
// forward_backward_pipelining_without_interleaving (1F1B; forward-only).
void run_without_interleaving(ScheduleContext& ctx);
// forward_backward_pipelining_with_interleaving.
void run_with_interleaving(ScheduleContext& ctx);

}  // namespace qk::parallel
