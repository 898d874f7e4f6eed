// trace_pipeline_schedule: the real schedule loops (run_without_interleaving,
// run_with_interleaving) run once per stage over a recording StageP2P, with a
// forward step and a backward hook that write the compute events.
#include "qk/parallel/schedule_trace.h"

#include "qk/autograd/autograd.h"
#include "qk/base/error.h"
#include "schedule_context.h"

namespace qk::parallel {

std::vector<StageTrace> trace_pipeline_schedule(const ScheduleTraceOptions& o) {
  QK_CHECK(o.pipeline_size >= 1, "trace_pipeline_schedule: the pipeline size must be >= 1, got ", o.pipeline_size);
  check_pipeline_microbatches(o.num_microbatches, o.pipeline_size, o.num_model_chunks);
  QK_CHECK(o.num_model_chunks == 1 || o.pipeline_size > 1, "the interleaved schedule (", o.num_model_chunks,
           " model chunks per rank) needs --pipeline-model-parallel-size > 1");
  std::vector<StageTrace> traces(static_cast<size_t>(o.pipeline_size));
  NoGradGuard no_grad;  // placeholders only: nothing to differentiate
  for (int r = 0; r < o.pipeline_size; ++r) {
    StageTrace& t = traces[static_cast<size_t>(r)];
    t.stage = r;
    StageP2P p2p(r, o.pipeline_size, &t);
    PipelineScheduleOptions so;
    so.num_microbatches = o.num_microbatches;
    so.tensor_shape = {1};
    so.num_model_chunks = o.num_model_chunks;
    so.overlap_p2p_comm = o.overlap_p2p_comm;
    so.forward_only = o.forward_only;
    so.before_backward = [&t](int chunk, int64_t micro) {
      t.ops.push_back({.kind = ScheduleOpKind::backward, .chunk = chunk, .microbatch = micro});
    };
    so.backward_step = [](const Tensor& input, const Tensor&, const Tensor&) {
      return input.defined() ? zeros({1}) : Tensor();
    };
    const ForwardStepFn forward = [&t](int chunk, int64_t micro, const Tensor&) {
      t.ops.push_back({.kind = ScheduleOpKind::forward, .chunk = chunk, .microbatch = micro});
      return ForwardStepResult{zeros({1}), {{"loss", {0, 1}}}};
    };
    ScheduleContext ctx{forward, so, p2p, {}};
    if (o.num_model_chunks > 1)
      run_with_interleaving(ctx);
    else
      run_without_interleaving(ctx);
    p2p.finish();
  }
  return traces;
}

}  // namespace qk::parallel
