// The order of operations each pipeline stage performs in one training step,
// recorded from the schedule code the trainer runs (pipeline_schedule.h: 1F1B,
// interleaved, forward-only) over a StageP2P that moves nothing: every
// forward and backward of a (chunk, micro-batch), every point-to-point
// exchange a stage posts and every wait on one, in program order. A
// simulator replays it with costs (qk::sim), so the bubble it predicts is the
// one the schedule really makes, not a formula.
//
//   qk::parallel::ScheduleTraceOptions o{.pipeline_size = 4, .num_microbatches = 8};
//   std::vector<qk::parallel::StageTrace> t = qk::parallel::trace_pipeline_schedule(o);
//   for (const auto& op : t[1].ops)            // stage 1: recv, F0, send, ...
//     if (op.kind == qk::parallel::ScheduleOpKind::forward) ...
//
// Exchanges are numbered per stage in the order they are posted. A post may
// send (to send_to), receive (from recv_from) or both, on one channel
// (activations go to the next stage, their gradients to the previous one;
// the interleaved schedule also wraps from the last stage to the first).
// Matching is by order per channel and direction: the k-th tensor stage a
// sends b on a channel is the k-th b receives from a there, as on the
// communicators of PipelineSchedule.
#pragma once

#include <cstdint>
#include <vector>

namespace qk::parallel {

enum class ScheduleOpKind { forward, backward, post, wait };
enum class P2PChannel { activation, gradient };

struct ScheduleOp {
  ScheduleOpKind kind = ScheduleOpKind::forward;
  int chunk = -1;           // forward, backward: the model chunk (virtual stage) of this rank
  int64_t microbatch = -1;  // forward, backward
  int exchange = -1;        // post, wait: the exchange's number on this stage
  P2PChannel channel = P2PChannel::activation;  // post
  int send_to = -1;         // post: the stage sent to (-1: sends nothing)
  int recv_from = -1;       // post: the stage received from (-1: receives nothing)
};

struct StageTrace {
  int stage = 0;
  std::vector<ScheduleOp> ops;
  int num_exchanges = 0;
};

struct ScheduleTraceOptions {
  int pipeline_size = 1;
  int64_t num_microbatches = 1;
  int num_model_chunks = 1;       // > 1: the interleaved schedule
  bool overlap_p2p_comm = false;  // --overlap-p2p-communication (interleaved only, as in the trainer)
  bool forward_only = false;
};

// One trace per stage, stage order. ValueError for what PipelineSchedule::run
// refuses (no micro-batch; interleaving without a multiple of the pipeline
// size or with one stage).
std::vector<StageTrace> trace_pipeline_schedule(const ScheduleTraceOptions& o);

}  // namespace qk::parallel
