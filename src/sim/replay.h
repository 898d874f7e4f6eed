// The pipeline schedule's trace (qk/parallel/schedule_trace.h) replayed with
// costs: each stage runs its operations in order; a wait on
// a receive ends when the matching send (the k-th on that channel between
// those two stages) has arrived, a send when it has arrived. Sends do not
// wait for their receiver (buffered, as qccl's). So the idle time at the
// pipeline's fill and drain, and any wait on a slow link, come out of the
// schedule itself. Stages share one clock, so a speed that depends on how
// many stages compute at once (processor sharing) can be replayed too.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "qk/parallel/schedule_trace.h"
#include "qk/parallel/timeline.h"

namespace qk::sim {

struct StageCosts {
  std::vector<double> forward, backward;  // seconds per micro-batch, per chunk
  std::vector<double> activation_bytes;   // what one micro-batch keeps per chunk until its backward
  double send_next = 0;                   // seconds for one activation to the next stage
  double send_prev = 0;                   // seconds for one gradient to the previous stage
};

struct StageReplay {
  double end = 0;                         // when its last operation finished
  double busy = 0;                        // forward + backward seconds
  std::vector<double> last_backward_start, last_backward_end;  // per chunk: micro-batch m-1's backward
  double peak_activation_bytes = 0;       // the most kept at once
  std::vector<parallel::Span> spans;      // forward, backward, send, recv (when asked for)
};

// How fast the stages compute while `computing` of them do, relative to
// their costs (which assume every stage computing): on a CPU host whose
// ranks outnumber its cores a waiting stage gives its cores to the others.
// Empty: always 1 (each stage has a device of its own).
using StageSpeed = std::function<double(int computing)>;

// ValueError when the trace and the costs disagree on the stages or chunks;
// InternalError for a trace that cannot finish (a schedule bug).
std::vector<StageReplay> replay(const std::vector<parallel::StageTrace>& trace, const std::vector<StageCosts>& costs,
                                bool record_spans, const StageSpeed& speed = {});

// The trace for (p, m, v, overlap), made once per process and kept.
std::shared_ptr<const std::vector<parallel::StageTrace>> cached_trace(const parallel::ScheduleTraceOptions& o);

}  // namespace qk::sim
