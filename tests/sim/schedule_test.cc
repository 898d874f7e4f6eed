// The pipeline schedule's trace replayed with costs: its bubble against
// theory, point-to-point delays, memory in flight.
#include <gtest/gtest.h>

#include "qk/parallel/schedule_trace.h"
#include "qk/parallel/timeline.h"
#include "replay.h"

namespace qk::sim {
namespace {

using parallel::ScheduleOpKind;

std::vector<StageCosts> uniform(int p, int v, double f, double b, double link = 0) {
  StageCosts c;
  c.forward.assign(static_cast<size_t>(v), f);
  c.backward.assign(static_cast<size_t>(v), b);
  c.activation_bytes.assign(static_cast<size_t>(v), 1.0);
  c.send_next = c.send_prev = link;
  return std::vector<StageCosts>(static_cast<size_t>(p), c);
}

double bubble(const std::vector<StageReplay>& r, int stage) {
  double end = 0;
  for (const auto& s : r) end = std::max(end, s.end);
  return (end - r[static_cast<size_t>(stage)].busy) / end;
}

TEST(ScheduleTrace, EveryStageRunsEveryMicroBatchOncePerChunk) {
  for (int v : {1, 2}) {
    const auto t = parallel::trace_pipeline_schedule({.pipeline_size = 4, .num_microbatches = 8, .num_model_chunks = v});
    ASSERT_EQ(t.size(), 4u);
    for (const auto& s : t) {
      int f = 0, b = 0;
      for (const auto& op : s.ops) {
        f += op.kind == ScheduleOpKind::forward;
        b += op.kind == ScheduleOpKind::backward;
      }
      EXPECT_EQ(f, 8 * v) << "stage " << s.stage;
      EXPECT_EQ(b, 8 * v) << "stage " << s.stage;
    }
  }
}

TEST(ScheduleTrace, RefusesWhatTheScheduleRefuses) {
  EXPECT_THROW(parallel::trace_pipeline_schedule({.pipeline_size = 4, .num_microbatches = 6, .num_model_chunks = 2}),
               ValueError);
  EXPECT_THROW(parallel::trace_pipeline_schedule({.pipeline_size = 2, .num_microbatches = 0}), ValueError);
}

// 1F1B with equal stages and free links: every stage idles (p-1) forward +
// backward times of a step of (m + p - 1) of them.
TEST(Replay, OneFOneBBubbleEqualsTheory) {
  for (auto [p, m] : {std::pair{2, 4}, {4, 8}, {4, 4}, {8, 32}, {4, 3}}) {
    const auto t = parallel::trace_pipeline_schedule({.pipeline_size = p, .num_microbatches = m});
    const auto r = replay(t, uniform(p, 1, 1.0, 2.0), false);
    const double theory = parallel::theoretical_bubble_fraction(p, m);
    for (int s = 0; s < p; ++s) EXPECT_NEAR(bubble(r, s), theory, 1e-12) << "p " << p << " m " << m << " stage " << s;
    double end = 0;
    for (const auto& x : r) end = std::max(end, x.end);
    EXPECT_DOUBLE_EQ(end, (m + p - 1) * 3.0);
  }
}

// Interleaved with v chunks of 1/v the work: the fill and drain shrink v
// times: idle (p-1)(F+B)/v beside m(F+B) of work, as Narayanan et al. 2021
// (section 2.2.2) have it: (p-1)/(v m + p - 1) of the step.
TEST(Replay, InterleavedBubbleEqualsTheory) {
  for (auto [p, m, v] : {std::tuple{4, 8, 2}, {4, 16, 4}, {8, 16, 2}, {4, 4, 3}}) {
    const auto t =
        parallel::trace_pipeline_schedule({.pipeline_size = p, .num_microbatches = m, .num_model_chunks = v});
    const auto r = replay(t, uniform(p, v, 1.0 / v, 2.0 / v), false);
    const double theory = static_cast<double>(p - 1) / (static_cast<double>(v) * m + p - 1);
    EXPECT_DOUBLE_EQ(parallel::theoretical_bubble_fraction(p, m, v), theory);
    for (int s = 0; s < p; ++s)
      EXPECT_NEAR(bubble(r, s), theory, 1e-12) << "p " << p << " m " << m << " v " << v << " stage " << s;
  }
}

// A link of L seconds each way delays every hand-over of the fill and the
// drain: 1F1B's critical path crosses 2(p-1) links, and the steady state
// hides them behind the other direction's work.
// Processor sharing: stages of one CPU host whose ranks outnumber its cores.
// With one core for four one-thread stages, a cost assumes a quarter of the
// core (all computing), and k computing get 1/k each: speed 4/k. The core
// never idles while links are free, so the bubble disappears: the step is
// all the stages' work on one core, m (f + b) = 24, where each stage on a
// device of its own takes (m + p - 1)(f + b) = 33.
TEST(Replay, SharedCoresFillTheBubble) {
  const int p = 4, m = 8;
  const auto t = parallel::trace_pipeline_schedule({.pipeline_size = p, .num_microbatches = m});
  const auto own = replay(t, uniform(p, 1, 1.0, 2.0), false);
  const auto one_core = replay(t, uniform(p, 1, 1.0, 2.0), false, [](int k) { return 4.0 / k; });
  auto end = [](const std::vector<StageReplay>& r) {
    double e = 0;
    for (const auto& x : r) e = std::max(e, x.end);
    return e;
  };
  EXPECT_NEAR(end(own), 33.0, 1e-12);
  EXPECT_NEAR(end(one_core), 24.0, 1e-9);
  // Two cores: the rate halves only beyond two computing (speed 2 min(1, 2/k)),
  // so the step lies between the two cores' share of the work (24) and 33.
  const auto two_cores = replay(t, uniform(p, 1, 1.0, 2.0), false, [](int k) { return 2.0 * std::min(1.0, 2.0 / k); });
  EXPECT_GT(end(two_cores), 24.0 + 1e-6);
  EXPECT_LT(end(two_cores), 33.0 - 1e-6);
  // A speed of 1 throughout is the replay without one, to the bit.
  const auto same = replay(t, uniform(p, 1, 1.0, 2.0, 0.25), true, [](int) { return 1.0; });
  const auto plain = replay(t, uniform(p, 1, 1.0, 2.0, 0.25), true);
  for (int s = 0; s < p; ++s) {
    EXPECT_EQ(same[static_cast<size_t>(s)].end, plain[static_cast<size_t>(s)].end);
    EXPECT_EQ(same[static_cast<size_t>(s)].busy, plain[static_cast<size_t>(s)].busy);
    EXPECT_EQ(same[static_cast<size_t>(s)].spans.size(), plain[static_cast<size_t>(s)].spans.size());
  }
}

TEST(Replay, LinksLengthenTheFillAndDrain) {
  const int p = 4, m = 8;
  const auto t = parallel::trace_pipeline_schedule({.pipeline_size = p, .num_microbatches = m});
  const auto fast = replay(t, uniform(p, 1, 1.0, 2.0, 0.0), false);
  const auto slow = replay(t, uniform(p, 1, 1.0, 2.0, 0.1), false);
  double a = 0, b = 0;
  for (size_t s = 0; s < fast.size(); ++s) {
    a = std::max(a, fast[s].end);
    b = std::max(b, slow[s].end);
  }
  EXPECT_GE(b - a, 2 * (p - 1) * 0.1 - 1e-9);
  EXPECT_LE(b - a, 2 * m * 0.1 + 2 * (p - 1) * 0.1);
}

// Activations in flight: 1F1B's stage r keeps p - r micro-batches at its peak.
TEST(Replay, ActivationsInFlightFollowTheSchedule) {
  const int p = 4, m = 8;
  const auto t = parallel::trace_pipeline_schedule({.pipeline_size = p, .num_microbatches = m});
  const auto r = replay(t, uniform(p, 1, 1.0, 2.0), false);
  for (int s = 0; s < p; ++s) EXPECT_DOUBLE_EQ(r[static_cast<size_t>(s)].peak_activation_bytes, p - s) << s;
}

TEST(Replay, SpansMakeATimelineWithTheSameBubble) {
  const int p = 4, m = 8;
  const auto t = parallel::trace_pipeline_schedule({.pipeline_size = p, .num_microbatches = m});
  const auto r = replay(t, uniform(p, 1, 1.0, 2.0), true);
  double end = 0;
  for (const auto& x : r) end = std::max(end, x.end);
  for (int s = 0; s < p; ++s) {
    parallel::Timeline tl(s);
    for (const auto& sp : r[static_cast<size_t>(s)].spans) tl.add(sp);
    tl.add_step({0, end * 1e6});
    EXPECT_NEAR(parallel::measure_bubble(tl, tl.last_step()).fraction, parallel::theoretical_bubble_fraction(p, m),
                1e-9);
  }
}

}  // namespace
}  // namespace qk::sim
