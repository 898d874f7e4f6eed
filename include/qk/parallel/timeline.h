// A per-rank timeline of a training step: forward, backward, send, receive
// and optimizer spans (the pipeline schedules record theirs, the training
// loop its optimizer step), the idle time between them, the measured
// pipeline bubble, and a Chrome / Perfetto trace of every rank (--profile).
//
//   qk::parallel::Timeline tl(ps->global_rank(), "pp 1");
//   tl.begin_step();
//   schedule.run(forward_step, {.timeline = &tl, ...});     // spans recorded inside
//   { qk::parallel::SpanScope s(&tl, qk::parallel::SpanKind::optimizer, "optimizer"); opt.step(); }
//   tl.end_step();
//   auto bubble = qk::parallel::measure_bubble(tl, tl.last_step());   // idle / step time
//   auto all = qk::parallel::gather_timelines(tl, qk::dist::group()); // collective; rank 0 gets all
//   if (qk::dist::rank() == 0) qk::parallel::write_chrome_trace("trace.json", all);
//
// Times are microseconds of the monotonic clock, which every process on a
// host shares, so ranks of one host line up in the trace (ranks on other
// hosts are offset by their clocks' difference).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qk/dist/process_group.h"

namespace qk::parallel {

// collective: a data-parallel reduction or gather outside forward and
// backward (what a simulated step shows exposed).
enum class SpanKind { forward, backward, send, recv, optimizer, idle, collective };
inline constexpr SpanKind kAllSpanKinds[] = {SpanKind::forward, SpanKind::backward,  SpanKind::send,
                                             SpanKind::recv,    SpanKind::optimizer, SpanKind::idle,
                                             SpanKind::collective};
const char* span_kind_name(SpanKind k);  // "forward", ...

struct Span {
  SpanKind kind = SpanKind::forward;
  double start_us = 0, end_us = 0;
  std::string name;         // "F 3", "recv act from 0", ...
  int chunk = -1;           // model chunk (virtual stage); -1: none
  int64_t microbatch = -1;  // -1: none
  double duration_us() const { return end_us - start_us; }
};

struct StepWindow {
  double start_us = 0, end_us = 0;
};

class Timeline {
 public:
  explicit Timeline(int rank = 0, std::string label = "");
  static double now_us();  // monotonic clock

  int rank() const { return rank_; }
  const std::string& label() const { return label_; }
  void add(Span s) { spans_.push_back(std::move(s)); }

  // The step windows (begin_step .. end_step) the bubble is measured over.
  void begin_step();
  void end_step();
  // A step window given in full (a simulated timeline's clock, not now_us()).
  void add_step(StepWindow w);
  const std::vector<StepWindow>& steps() const { return steps_; }
  StepWindow last_step() const;

  const std::vector<Span>& spans() const { return spans_; }
  void clear();

  // Wire format for gather_timelines.
  std::string serialize() const;
  static Timeline deserialize(const std::string& bytes);

 private:
  int rank_ = 0;
  std::string label_;
  std::vector<Span> spans_;
  std::vector<StepWindow> steps_;
};

// Records [construction, destruction) as a span of `t` (nothing when t is null).
class SpanScope {
 public:
  SpanScope(Timeline* t, SpanKind kind, std::string name, int chunk = -1, int64_t microbatch = -1);
  ~SpanScope();
  SpanScope(const SpanScope&) = delete;
  SpanScope& operator=(const SpanScope&) = delete;

 private:
  Timeline* t_;
  Span s_;
};

// The gaps inside `window` not covered by a forward, backward or optimizer
// span: the time this rank computed nothing (waiting on a peer, or on
// nothing at all at the pipeline's fill and drain).
std::vector<Span> idle_spans(const Timeline& t, StepWindow window);

struct BubbleStats {
  double step_us = 0;     // the window
  double compute_us = 0;  // forward + backward + optimizer inside it
  double idle_us = 0;     // step_us - compute_us
  double fraction = 0;    // idle_us / step_us: the measured bubble
};
// This rank's bubble over `window`. For the pipeline's bubble take the same
// window on every rank (the step's first start to its last end over all
// stages: common_window), since a stage that finishes early idles until the
// last one is done.
BubbleStats measure_bubble(const Timeline& t, StepWindow window);
// Collective over `group`: the earliest start and latest end of every
// rank's last step (one small all-reduce).
StepWindow common_window(const Timeline& t, dist::ProcessGroup& group);

// Theory (Narayanan et al. 2021): 1F1B idles (p-1)/(m+p-1) of a step; the
// interleaved schedule with v chunks per rank shrinks the fill and drain v
// times: (p-1)/(v m + p - 1).
double theoretical_bubble_fraction(int pipeline_size, int64_t num_microbatches, int virtual_size = 1);

// Collective over `group`: every rank's timeline; the full list (in group
// rank order) on group rank 0, empty elsewhere.
std::vector<Timeline> gather_timelines(const Timeline& mine, dist::ProcessGroup& group);

// Chrome trace-event JSON (chrome://tracing, ui.perfetto.dev): one process per
// timeline (pid = its rank, named by its label), one thread per span kind,
// idle spans derived over each timeline's step windows; times relative to
// the earliest span.
std::string chrome_trace_json(const std::vector<Timeline>& timelines);
// Writes it (IoError naming the path).
void write_chrome_trace(const std::string& path, const std::vector<Timeline>& timelines);

}  // namespace qk::parallel
