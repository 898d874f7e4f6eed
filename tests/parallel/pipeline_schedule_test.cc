// The pipeline schedules on forked stages with a toy model (a chain of
// tanh(Linear) layers, one per model chunk, then a squared error): forward-
// only, 1F1B and interleaved 1F1B (with and without overlapped p2p) give the
// unsplit model's losses and gradients for every micro-batch count the
// constraints allow (1..3 x stages), also when every send waits for its
// receiver (single-copy transfers of every activation); the constraints are
// errors naming the flags; a killed stage makes the others fail within the
// deadline naming it; the trace shows 1F1B's order.
//
// Exactness: each layer sees the same inputs and output gradients as in the
// unsplit chain and accumulates micro-batches in the same order, so losses
// and gradients are compared bit for bit.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "parallel/pp_ranks.h"
#include "parallel/tp_ranks.h"
#include "qk/autograd/functions.h"
#include "qk/nn/linear.h"
#include "qk/parallel/pipeline_schedule.h"
#include "qk/tensor/generator.h"

namespace qk::parallel {
namespace {

using qk_tp_test::require_equal;

constexpr int64_t kBatch = 2, kSeq = 3, kHidden = 4;

Tensor input_of(int64_t micro) {
  Generator g(1000 + static_cast<uint64_t>(micro));
  return randn({kBatch, kSeq, kHidden}, {}, g);
}
Tensor target_of(int64_t micro) {
  Generator g(2000 + static_cast<uint64_t>(micro));
  return randn({kBatch, kSeq, kHidden}, {}, g);
}
Tensor micro_loss(const Tensor& h, int64_t micro) { return mean(square(h - target_of(micro))); }

// Layers 0..n-1, the same on every rank (same seed).
std::vector<nn::Linear> make_chain(int n) {
  manual_seed(7);
  std::vector<nn::Linear> layers;
  for (int i = 0; i < n; ++i) layers.push_back(nn::Linear(kHidden, kHidden));
  return layers;
}

struct Reference {
  double loss_sum = 0;
  std::vector<nn::Linear> layers;
};
// The unsplit run: every layer, micro-batches in order, loss / m.
Reference unsplit(int n_layers, int64_t m, bool forward_only) {
  Reference r{0, make_chain(n_layers)};
  for (int64_t j = 0; j < m; ++j) {
    Tensor h = input_of(j);
    for (auto& l : r.layers) h = tanh(l(h));
    Tensor loss = micro_loss(h, j);
    r.loss_sum += loss.item_double();
    if (!forward_only) (m > 1 ? loss / static_cast<double>(m) : loss).backward();
  }
  return r;
}

struct Case {
  int64_t microbatches;
  int chunks = 1;
  bool overlap = false;
  bool forward_only = false;
};

// One stage's run of `c` against the unsplit chain; layer c*p + stage is chunk c's.
void check_against_unsplit(PipelineSchedule& schedule, const Case& c, Timeline* timeline = nullptr) {
  const int p = schedule.num_stages(), stage = schedule.stage();
  const int n_layers = p * c.chunks;
  const Reference ref = unsplit(n_layers, c.microbatches, c.forward_only);
  std::vector<nn::Linear> layers = make_chain(n_layers);
  PipelineScheduleOptions o;
  o.num_microbatches = c.microbatches;
  o.tensor_shape = {kBatch, kSeq, kHidden};
  o.num_model_chunks = c.chunks;
  o.overlap_p2p_comm = c.overlap;
  o.forward_only = c.forward_only;
  o.timeline = timeline;
  const PipelineScheduleResult r = schedule.run(
      [&](int chunk, int64_t micro, const Tensor& input) {
        const bool first = stage == 0 && chunk == 0, last = stage == p - 1 && chunk == c.chunks - 1;
        REQUIRE(first != input.defined(), "stage ", stage, " chunk ", chunk, ": input defined only after the first");
        REQUIRE(c.forward_only || !input.defined() || input.requires_grad(), "inputs require grad in training");
        Tensor h = tanh(layers[static_cast<size_t>(chunk * p + stage)](first ? input_of(micro) : input));
        return ForwardStepResult{last ? micro_loss(h, micro) : h, {}};
      },
      o);
  const std::string what = "m=" + std::to_string(c.microbatches) + " v=" + std::to_string(c.chunks) +
                           (c.overlap ? " overlap" : "") + (c.forward_only ? " forward-only" : "");
  REQUIRE(r.num_microbatches == c.microbatches, what);
  if (stage == p - 1) {
    REQUIRE(r.metrics.size() == 1 && r.metrics.at("loss").count == static_cast<double>(c.microbatches), what,
            ": one loss per micro-batch");
    REQUIRE(r.metrics.at("loss").sum == ref.loss_sum, what, ": loss sum ", r.metrics.at("loss").sum, " vs ",
            ref.loss_sum);
  } else {
    REQUIRE(r.metrics.empty(), what, ": metrics only on the last stage");
  }
  for (int chunk = 0; chunk < c.chunks; ++chunk) {
    const size_t l = static_cast<size_t>(chunk * p + stage);
    if (c.forward_only) {
      REQUIRE(!layers[l]->weight.grad().defined(), what, ": forward-only left a gradient");
      continue;
    }
    require_equal(layers[l]->weight.grad(), ref.layers[l]->weight.grad(), what + " weight grad of layer " +
                                                                              std::to_string(l));
    require_equal(layers[l]->bias.grad(), ref.layers[l]->bias.grad(), what + " bias grad of layer " +
                                                                          std::to_string(l));
  }
}

ParallelSizes pipeline_of(int p) {
  ParallelSizes s;
  s.pipeline_model_parallel_size = p;
  return s;
}

void run_every_count(int p, int chunks, bool rendezvous) {
  auto r = qk_pp_test::on_parallel_ranks(p, "pp-counts", pipeline_of(p), [=](int, ParallelState& ps) {
    // Activations (96 bytes) then go single-copy: the sender posts its buffer
    // and waits until the receiver has read it.
    if (rendezvous) ::setenv("QCCL_CMA_MIN_BYTES", "64", 1);
    PipelineSchedule schedule(*ps.group(GroupKind::pp));
    for (int64_t m = 1; m <= 3 * p; ++m) {
      if (chunks > 1 && m % p != 0) continue;  // interleaving needs multiples of p
      for (bool overlap : chunks > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
        check_against_unsplit(schedule, {m, chunks, overlap, false});
        check_against_unsplit(schedule, {m, chunks, overlap, true});
      }
    }
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(PipelineSchedule, OneStageIsPlainMicrobatchAccumulation) {
  auto r = qk_pp_test::on_parallel_ranks(1, "pp-one", pipeline_of(1), [](int, ParallelState& ps) {
    PipelineSchedule schedule(*ps.group(GroupKind::pp));
    for (int64_t m : {1, 3}) check_against_unsplit(schedule, {m});
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(PipelineSchedule, OneFOneBOnTwoStagesEqualsUnsplitForOneToSixMicrobatches) { run_every_count(2, 1, false); }

TEST(PipelineSchedule, OneFOneBOnFourStagesEqualsUnsplitForOneToTwelveMicrobatches) {
  run_every_count(4, 1, false);
}

TEST(PipelineSchedule, InterleavedTwoChunksOnTwoStagesEqualsUnsplitWithAndWithoutOverlap) {
  run_every_count(2, 2, false);
}

TEST(PipelineSchedule, InterleavedOnFourStagesEqualsUnsplitWithAndWithoutOverlap) { run_every_count(4, 2, false); }

TEST(PipelineSchedule, NoDeadlockWhenEverySendWaitsForItsReceiver) {
  run_every_count(2, 2, true);
  run_every_count(4, 1, true);
  run_every_count(4, 3, true);
}

TEST(PipelineSchedule, ConstraintsAreErrorsNamingTheFlags) {
  try {
    check_pipeline_microbatches(6, 4, 2);
    FAIL() << "6 micro-batches on 4 stages interleaved";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--pipeline-model-parallel-size (4)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--global-batch-size"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--micro-batch-size"), std::string::npos) << msg;
  }
  EXPECT_THROW(check_pipeline_microbatches(0, 2, 1), ValueError);
  EXPECT_NO_THROW(check_pipeline_microbatches(5, 2, 1));  // 1F1B takes any count
  EXPECT_NO_THROW(check_pipeline_microbatches(8, 4, 2));
}

TEST(PipelineSchedule, AStageOutputOfTheWrongShapeIsAnError) {
  auto r = qk_pp_test::on_parallel_ranks(2, "pp-shape", pipeline_of(2), [](int rank, ParallelState& ps) {
    PipelineSchedule schedule(*ps.group(GroupKind::pp));
    PipelineScheduleOptions o;
    o.num_microbatches = 2;
    o.tensor_shape = {kBatch, kSeq, kHidden};
    if (rank == 1) return;  // the first stage fails before sending anything
    try {
      schedule.run([](int, int64_t, const Tensor&) { return ForwardStepResult{zeros({kBatch, kSeq + 1, kHidden}), {}}; },
                   o);
      REQUIRE(false, "no error");
    } catch (const ValueError& e) {
      const std::string msg = e.what();
      REQUIRE(msg.find("[2, 4, 4]") != std::string::npos && msg.find("--micro-batch-size") != std::string::npos,
              "message: ", msg);
    }
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(PipelineSchedule, BroadcastFromTheLastStageGivesEveryStageTheMetrics) {
  auto r = qk_pp_test::on_parallel_ranks(3, "pp-bcast", pipeline_of(3), [](int rank, ParallelState& ps) {
    StepMetrics mine;
    if (rank == 2) mine = {{"lm loss", {12.5, 5}}, {"z", {1, 2}}};
    const StepMetrics all = broadcast_from_last_stage(mine, *ps.group(GroupKind::pp));
    REQUIRE(all.size() == 2 && all.at("lm loss").sum == 12.5 && all.at("lm loss").count == 5 && all.at("z").count == 2,
            "rank ", rank, " got ", all.size(), " metrics");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// Stage 1 of 4 dies (SIGKILL) in its second step. Its neighbours' errors name
// it; every survivor fails, within the deadline.
TEST(PipelineSchedule, AKilledStageFailsTheOthersWithinTheDeadlineNamingIt) {
  constexpr double kDeadline = 4;
  const std::string dir = ::testing::TempDir() + "pp_kill_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  qk_pp_test::RankOptions ro;
  ro.timeout_s = kDeadline;
  ro.watchdog_s = 60;
  auto r = qk_pp_test::on_parallel_ranks(
      4, "pp-kill", pipeline_of(4),
      [&](int rank, ParallelState& ps) {
        PipelineSchedule schedule(*ps.group(GroupKind::pp));
        check_against_unsplit(schedule, {4});  // one healthy step
        PipelineScheduleOptions o;
        o.num_microbatches = 4;
        o.tensor_shape = {kBatch, kSeq, kHidden};
        std::vector<nn::Linear> layers = make_chain(4);
        const auto t0 = std::chrono::steady_clock::now();
        std::string error;
        try {
          schedule.run(
              [&](int, int64_t micro, const Tensor& input) {
                if (rank == 1 && micro == 1) ::raise(SIGKILL);
                Tensor h = tanh(layers[static_cast<size_t>(rank)](rank == 0 ? input_of(micro) : input));
                return ForwardStepResult{rank == 3 ? micro_loss(h, micro) : h, {}};
              },
              o);
        } catch (const Error& e) {
          error = e.what();
        }
        const double seconds = qccl_test::seconds_since(t0);
        REQUIRE(!error.empty(), "rank ", rank, " finished the step without stage 1");
        REQUIRE(seconds < kDeadline + 5, "rank ", rank, " failed after ", seconds, " s");
        std::ofstream(dir + "/" + std::to_string(rank)) << error;
      },
      ro);
  ASSERT_FALSE(r.timed_out) << r.summary();
  EXPECT_EQ(r.status[1], 128 + SIGKILL);
  for (int q : {0, 2, 3}) EXPECT_EQ(r.status[q], 0) << r.summary();
  for (int q : {0, 2}) {
    std::ifstream f(dir + "/" + std::to_string(q));
    const std::string msg((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_NE(msg.find("stage 1 (global rank 1)"), std::string::npos) << "rank " << q << ": " << msg;
  }
  std::filesystem::remove_all(dir);
}

// The trace of 2 stages x 4 micro-batches: every rank a process, forward and
// backward spans in 1F1B's order, idle time where the bubble is.
TEST(PipelineSchedule, TraceJsonShowsTheOneFOneBOrder) {
  const std::string path = ::testing::TempDir() + "pp_trace_" + std::to_string(::getpid()) + ".json";
  auto r = qk_pp_test::on_parallel_ranks(2, "pp-trace", pipeline_of(2), [&](int rank, ParallelState& ps) {
    PipelineSchedule schedule(*ps.group(GroupKind::pp));
    Timeline tl(rank, "pp stage " + std::to_string(rank));
    tl.begin_step();
    check_against_unsplit(schedule, {4}, &tl);
    tl.end_step();
    const BubbleStats b = measure_bubble(tl, common_window(tl, qk::dist::group()));
    REQUIRE(b.fraction > 0 && b.fraction < 1, "bubble ", b.fraction);
    const std::vector<Timeline> all = gather_timelines(tl, qk::dist::group());
    if (rank == 0) write_chrome_trace(path, all);
  });
  ASSERT_TRUE(r.ok()) << r.summary();
  std::ifstream f(path);
  const nlohmann::json trace = nlohmann::json::parse(f);
  std::map<int, std::vector<std::pair<double, std::string>>> compute;  // pid -> (ts, name)
  std::map<int, std::string> process_names;
  std::set<std::string> kinds;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "process_name")
      process_names[e.at("pid").get<int>()] = e.at("args").at("name").get<std::string>();
    if (e.at("ph") != "X") continue;
    kinds.insert(e.at("cat").get<std::string>());
    if (e.at("cat") == "forward" || e.at("cat") == "backward")
      compute[e.at("pid").get<int>()].emplace_back(e.at("ts").get<double>(), e.at("name").get<std::string>());
  }
  EXPECT_EQ(process_names[0], "pp stage 0");
  EXPECT_EQ(process_names[1], "pp stage 1");
  for (const char* k : {"forward", "backward", "send", "recv", "idle"}) EXPECT_TRUE(kinds.count(k)) << k;
  const std::map<int, std::vector<std::string>> want = {
      {0, {"F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"}},  // one warm-up forward
      {1, {"F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"}}};
  for (auto& [pid, spans] : compute) {
    std::sort(spans.begin(), spans.end());
    std::vector<std::string> order;
    for (const auto& s : spans) order.push_back(s.second);
    EXPECT_EQ(order, want.at(pid)) << "stage " << pid;
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace qk::parallel
