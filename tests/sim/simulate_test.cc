// A whole simulated step: its sums, throughput and MFU, the layout checks,
// the trace, the JSON, the search, and the reliability model.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "qk/base/error.h"
#include "qk/sim/reliability.h"
#include "qk/recipes/gpt_pretrain.h"
#include "qk/sim/simulate.h"
#include "qk/transformer/param_count.h"
#include "qk/transformer/config.h"
#include "test_cluster.h"

namespace qk::sim {
namespace {

std::vector<std::string> small(std::vector<std::string> more = {}) {
  std::vector<std::string> f = {"--num-layers", "8",  "--hidden-size", "1024", "--num-attention-heads", "16",
                                "--seq-length", "512", "--max-position-embeddings", "512", "--vocab-size", "32000",
                                "--bf16", "--micro-batch-size", "1", "--global-batch-size", "32"};
  f.insert(f.end(), more.begin(), more.end());
  return f;
}

recipes::MegatronArgs parse(const std::vector<std::string>& f, int64_t world) {
  return recipes::parse_megatron_args(f, megatron_options(world)).args;
}

TEST(Simulate, ThroughputAndMfuFollowFromTheStepTime) {
  const Cluster c = test::round_cluster();
  const recipes::MegatronArgs a = parse(small(), 1);
  const SimResult r = simulate(a, c);
  ASSERT_GT(r.step_time_s, 0);
  EXPECT_DOUBLE_EQ(r.tokens_per_s, 32.0 * 512 / r.step_time_s);
  EXPECT_NEAR(r.mfu, r.model_flops_per_step / r.step_time_s / 100e12, 1e-12);
  EXPECT_NEAR(r.tflops_per_gpu, r.model_flops_per_step / r.step_time_s / 1e12, 1e-9);
  EXPECT_EQ(r.dtype, "bf16");
  EXPECT_EQ(r.layout.num_microbatches, 32);
  // One GPU: no communication, no bubble; compute and the optimizer are the step.
  EXPECT_NEAR(r.time.tp_comm + r.time.dp_comm + r.time.pp_wait + r.time.bubble, 0, 1e-12);
  EXPECT_NEAR(r.time.compute + r.time.optimizer, r.step_time_s, 1e-9 * r.step_time_s);
  // GEMMs at half of peak at most: MFU below 50%.
  EXPECT_LT(r.mfu, 0.5);
  EXPECT_GT(r.mfu, 0.2);
}

// A calibrated streaming kind replaces the bandwidth estimate of exactly
// its own pieces: a slow GELU (as erf on a CPU is) adds its bytes' time at
// the slow rate, in every layer and micro-batch, and nothing else changes.
TEST(Simulate, CalibratedKindsPriceTheirOwnPieces) {
  Cluster c = test::round_cluster();
  const recipes::MegatronArgs a = parse(small(), 1);
  const SimResult plain = simulate(a, c);
  for (const char* k : {"gelu.forward", "gelu.backward"}) c.device.stream_kernels[k].samples = {{1.0, 1.0}};
  const SimResult slow = simulate(a, c);
  const double act = 512.0 * 4096;                  // tokens x ffn per micro-batch
  const double bytes = (2 * 2 + 3 * 2) * act;       // bf16: forward 2e, backward 3e per element
  const double per_call = bytes / 1e9 - bytes / 500e9;
  EXPECT_NEAR(slow.time.compute - plain.time.compute, 8 * 32 * per_call, 1e-9 * slow.time.compute);
  // A kind this model does not use (RMSNorm under LayerNorm) changes nothing.
  Cluster other = test::round_cluster();
  other.device.stream_kernels["rms_norm.forward"].samples = {{1.0, 1.0}};
  EXPECT_DOUBLE_EQ(simulate(a, other).step_time_s, plain.step_time_s);
}

// The MoE layer's routing and permutations are one calibrated kind
// (moe_dispatch): on a device with it they take its rate over the bytes
// the model counts (the router's scores, the routed rows there and back),
// in each MoE layer both ways; without it, the same bytes at bandwidth.
TEST(Simulate, CalibratedMoeDispatchPricesRoutingAndPermutation) {
  Cluster c = test::round_cluster();
  const recipes::MegatronArgs a = parse(small({"--num-experts", "4", "--moe-router-topk", "2"}), 1);
  const SimResult plain = simulate(a, c);
  for (const char* k : {"moe_dispatch.forward", "moe_dispatch.backward"}) c.device.stream_kernels[k].samples = {{1.0, 1.0}};
  const SimResult slow = simulate(a, c);
  const double tokens = 512, routed = 2 * tokens;
  const double bytes = 12 * tokens * 4 + 2 * (2 * 2 * routed * 1024);  // scores; bf16 rows each way
  const double per_call = bytes / 1e9 - bytes / 500e9;
  EXPECT_NEAR(slow.time.compute - plain.time.compute, 2 * 8 * 32 * per_call, 1e-9 * slow.time.compute);
}

// The trainer's per-parameter passes: where calibrated, each micro-batch
// but the first adds its gradients to the sum (own bf16 grad read, the fp32
// sum read and written: 10 bytes a parameter) and the optimizer reads every
// gradient once for the norm; uncalibrated, the accumulation is free (fused
// into the weight-gradient GEMMs, as Megatron's) and the norm streams at the
// device's bandwidth.
TEST(Simulate, CalibratedParameterPassesPriceAccumulationAndTheNorm) {
  Cluster c = test::round_cluster();
  const recipes::MegatronArgs a = parse(small(), 1);
  const double params =
      static_cast<double>(transformer::num_parameters(recipes::gpt_transformer_config(a, 32000)).total());
  const SimResult plain = simulate(a, c);
  c.device.stream_kernels["grad_accumulate"].samples = {{1.0, 1.0}};
  const SimResult accumulating = simulate(a, c);
  EXPECT_NEAR(accumulating.time.compute - plain.time.compute, 31 * 10 * params / 1e9, 1e-9 * accumulating.time.compute);
  EXPECT_DOUBLE_EQ(accumulating.time.optimizer, plain.time.optimizer);
  c.device.stream_kernels["grad_norm"].samples = {{1.0, 1.0}};
  const SimResult norm = simulate(a, c);
  EXPECT_NEAR(norm.time.optimizer - plain.time.optimizer, 4 * params / 1e9 - 4 * params / 500e9, 1e-9 * norm.time.optimizer);
  // Without clipping (and without fp16's overflow check) there is no norm pass.
  const SimResult unclipped = simulate(parse(small({"--clip-grad", "0"}), 1), c);
  EXPECT_NEAR(norm.time.optimizer - unclipped.time.optimizer, 4 * params / 1e9, 1e-9 * norm.time.optimizer);
}

// A calibrated linear kind prices each linear layer's bias (forward: added,
// 2 bytes a bf16 output read and written; backward: summed, read once) in
// the four linear layers of every layer; without biases, or uncalibrated
// (the published stacks fuse them into the GEMMs), nothing.
TEST(Simulate, CalibratedLinearPricesTheBiases) {
  Cluster c = test::round_cluster();
  const recipes::MegatronArgs a = parse(small(), 1);
  const SimResult plain = simulate(a, c);
  for (const char* k : {"linear.forward", "linear.backward"}) c.device.stream_kernels[k].samples = {{1.0, 1.0}};
  const SimResult biased = simulate(a, c);
  const double outputs = 512.0 * (3 * 1024 + 1024 + 4096 + 1024);  // qkv, proj, fc1, fc2 rows x out
  EXPECT_NEAR(biased.time.compute - plain.time.compute, 8 * 32 * (2 + 1) * 2 * outputs / 1e9,
              1e-9 * biased.time.compute);
  const recipes::MegatronArgs no_bias = parse(small({"--disable-bias-linear"}), 1);
  EXPECT_DOUBLE_EQ(simulate(no_bias, c).step_time_s, simulate(no_bias, test::round_cluster()).step_time_s);
}

TEST(Simulate, DataParallelSplitsTheBatch) {
  const Cluster c = test::round_cluster();
  const SimResult one = simulate(parse(small(), 1), c);
  const SimResult four = simulate(parse(small(), 4), c);
  EXPECT_EQ(four.layout.dp, 4);
  EXPECT_EQ(four.layout.num_microbatches, 8);
  EXPECT_GT(four.time.dp_comm, 0);
  // A quarter of the micro-batches, plus the gradient all-reduce.
  EXPECT_NEAR(four.time.compute, one.time.compute / 4, one.time.compute * 1e-9);
  EXPECT_LT(four.step_time_s, one.step_time_s / 2);
}

TEST(Simulate, OverlappedReductionHidesBehindTheBackward) {
  const Cluster c = test::round_cluster();
  const SimResult plain = simulate(parse(small({"--use-distributed-optimizer"}), 8), c);
  const SimResult overlapped = simulate(parse(small({"--use-distributed-optimizer", "--overlap-grad-reduce"}), 8), c);
  EXPECT_LT(overlapped.time.dp_comm, plain.time.dp_comm);
}

TEST(Simulate, PipelineBubbleMatchesTheScheduleAndTheTraceHasEveryStage) {
  const Cluster c = test::round_cluster();
  // A vocabulary of 128: the stages differ only by the embedding and the
  // output layer, which cost little next to two layers, so the bubble is
  // close to 1F1B's (p-1)/(m+p-1) = 3/35.
  auto flags = small({"--pipeline-model-parallel-size", "4"});
  *(std::find(flags.begin(), flags.end(), "--vocab-size") + 1) = "128";
  const SimResult r = simulate(parse(flags, 4), c);
  ASSERT_EQ(r.timelines.size(), 4u);
  EXPECT_NEAR(r.bubble_fraction, 3.0 / 35.0, 0.01);
  for (const auto& tl : r.timelines) {
    EXPECT_FALSE(tl.spans().empty());
    EXPECT_NEAR(tl.last_step().end_us, r.step_time_s * 1e6, 1);
  }
  const std::string trace = parallel::chrome_trace_json(r.timelines);
  EXPECT_NE(trace.find("\"F0\""), std::string::npos);
  EXPECT_NE(trace.find("\"optimizer\""), std::string::npos);
  flags.insert(flags.end(), {"--num-layers-per-virtual-pipeline-stage", "1"});
  const SimResult v = simulate(parse(flags, 4), c);
  EXPECT_EQ(v.layout.vp, 2);
  EXPECT_LT(v.bubble_fraction, r.bubble_fraction);
}

// Four pipeline stages on a two-core host: while some stages wait on a
// hand-over the others get their cores, so the fill and drain cost less than
// on devices of their own; the step cannot beat the cores doing all the
// work without a pause.
TEST(Simulate, PipelineOnFewerCoresThanRanksFillsItsBubble) {
  Cluster cpu = test::round_cluster();
  cpu.device.cpu_cores = 2;
  cpu.device.threads_per_rank = 1;
  auto flags = small({"--pipeline-model-parallel-size", "4"});
  *(std::find(flags.begin(), flags.end(), "--vocab-size") + 1) = "128";
  const SimResult shared = simulate(parse(flags, 4), cpu);
  Cluster cpu8 = cpu;
  cpu8.device.cpu_cores = 8;  // a core per rank: the plain schedule
  const SimResult own = simulate(parse(flags, 4), cpu8);
  // Two ranks a core, each rank always at half a core, would take twice as
  // long as a core each; the four stages' work on two busy cores is a floor.
  const double work_on_two_cores = own.time.compute * 4 / 2;
  EXPECT_LT(shared.step_time_s, 2 * own.step_time_s * 0.99);
  EXPECT_GT(shared.step_time_s, work_on_two_cores);
  EXPECT_LT(shared.bubble_fraction, own.bubble_fraction);
}

TEST(Simulate, LayoutsThatDoNotDivideTheWorldAreRefusedByTheParser) {
  try {
    parse(small({"--tensor-model-parallel-size", "8"}), 12);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(e.message().find("world size (12) is not divisible by --tensor-model-parallel-size (8)"),
              std::string::npos)
        << e.message();
  }
  EXPECT_THROW(parse(small({"--global-batch-size", "30"}), 4), ValueError);  // 30 % (1 x 4)
}

TEST(Simulate, NeedsTheVocabulary) {
  std::vector<std::string> f = small();
  f.erase(std::find(f.begin(), f.end(), "--vocab-size"), std::find(f.begin(), f.end(), "--vocab-size") + 2);
  try {
    simulate(parse(f, 1), test::round_cluster());
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(e.message().find("--vocab-size"), std::string::npos) << e.message();
  }
}

TEST(Simulate, ModelsFlagsThisBuildCannotRun) {
  // --context-parallel-size and --tp-comm-overlap are accepted for planning, with a note.
  const auto p = recipes::parse_megatron_args(
      small({"--context-parallel-size", "2", "--tensor-model-parallel-size", "2", "--sequence-parallel",
             "--tp-comm-overlap"}),
      megatron_options(8));
  ASSERT_GE(p.notes.size(), 2u);
  const SimResult r = simulate(p.args, test::round_cluster());
  EXPECT_EQ(r.layout.cp, 2);
  EXPECT_TRUE(r.layout.tp_comm_overlap);
  // Still refused where they are not asked to be modelled (qk pretrain-gpt).
  recipes::MegatronArgsOptions run = megatron_options(8);
  run.modelled_flags.clear();
  EXPECT_THROW(recipes::parse_megatron_args(small({"--context-parallel-size", "2"}), run), ValueError);
}

TEST(Simulate, JsonHasTheFieldsScriptsRead) {
  const SimResult r = simulate(parse(small(), 2), test::round_cluster());
  const auto j = nlohmann::json::parse(result_json(r));
  for (const char* k : {"step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "mem_gb_per_gpu", "fits",
                        "bubble_fraction", "exposed_comm_fraction", "layout", "memory_gb", "time_s"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_DOUBLE_EQ(j["step_time_s"].get<double>(), r.step_time_s);
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_EQ(j["layout"]["dp"].get<int>(), 2);
  EXPECT_NE(j["layout"]["flags"].get<std::string>().find("--tensor-model-parallel-size 1"), std::string::npos);
}

TEST(Search, RanksTheLayoutsThatFitByThroughput) {
  const Cluster c = test::round_cluster(/*memory_gb=*/24);
  const recipes::MegatronArgs base = parse(small(), 8);
  SearchOptions o;
  o.top = 1000;
  const SearchResult s = search_layouts(base, c, o);
  ASSERT_GT(s.ranked.size(), 3u);
  EXPECT_EQ(static_cast<int64_t>(s.ranked.size()), s.fitting);
  EXPECT_GT(s.evaluated, s.fitting - 1);
  for (size_t i = 0; i < s.ranked.size(); ++i) {
    const Layout& l = s.ranked[i].layout;
    EXPECT_TRUE(s.ranked[i].fits);
    EXPECT_EQ(l.tp * l.pp * l.cp * l.dp, 8) << l.describe();
    if (i > 0) {
      EXPECT_GE(s.ranked[i - 1].tokens_per_s, s.ranked[i].tokens_per_s);
    }
  }
  // Nothing simulated by hand beats the first.
  for (const auto& flags : std::vector<std::vector<std::string>>{
           {},
           {"--tensor-model-parallel-size", "4", "--sequence-parallel"},
           {"--pipeline-model-parallel-size", "2", "--micro-batch-size", "2"},
           {"--use-distributed-optimizer", "--overlap-grad-reduce", "--micro-batch-size", "4"}}) {
    const SimResult r = simulate(parse(small(flags), 8), c);
    if (r.fits) {
      EXPECT_LE(r.tokens_per_s, s.ranked.front().tokens_per_s * (1 + 1e-9)) << r.layout.describe();
    }
  }
  // top keeps the first ones.
  o.top = 3;
  const SearchResult three = search_layouts(base, c, o);
  ASSERT_EQ(three.ranked.size(), 3u);
  EXPECT_DOUBLE_EQ(three.ranked[0].tokens_per_s, s.ranked[0].tokens_per_s);
}

TEST(Search, VariesOnlyWhatItIsAskedTo) {
  SearchOptions o;
  o.vary = {"mbs"};
  o.top = 100;
  const SearchResult s = search_layouts(parse(small({"--tensor-model-parallel-size", "2"}), 8), test::round_cluster(), o);
  EXPECT_EQ(s.evaluated, 4);  // micro batches 1, 2, 4, 8 (32 / dp 4 = 8 per rank)
  for (const auto& r : s.ranked) EXPECT_EQ(r.layout.tp, 2);
  o.vary = {"nonsense"};
  EXPECT_THROW(search_layouts(parse(small(), 8), test::round_cluster(), o), ValueError);
}

TEST(Reliability, YoungDalyIntervalAndGoodput) {
  ReliabilityInput in;
  in.devices = 1024;
  in.devices_per_node = 8;      // 128 nodes
  in.node_mtbf_hours = 1280;    // a failure every 10 h somewhere
  in.checkpoint_write_s = 50;
  in.restart_s = 0;
  const Reliability r = reliability(in);
  EXPECT_DOUBLE_EQ(r.system_mtbf_s, 36000);
  EXPECT_DOUBLE_EQ(r.failures_per_day, 2.4);
  EXPECT_NEAR(r.checkpoint_interval_s, std::sqrt(2 * 50.0 * 36000) - 50, 1e-9);  // 1847.4 s
  const double tau = r.checkpoint_interval_s;
  EXPECT_NEAR(r.goodput, tau / (tau + 50) * (1 - (tau + 50) / 2 / 36000), 1e-12);  // 0.948
  EXPECT_GT(r.goodput, goodput_at_interval(in, tau / 2));
  EXPECT_GT(r.goodput, goodput_at_interval(in, tau * 2));
  in.restart_s = 600;
  EXPECT_NEAR(reliability(in).goodput, tau / (tau + 50) * (1 - (600 + (tau + 50) / 2) / 36000), 1e-12);
  in.node_mtbf_hours = 0;
  EXPECT_THROW(reliability(in), ValueError);
}

}  // namespace
}  // namespace qk::sim
