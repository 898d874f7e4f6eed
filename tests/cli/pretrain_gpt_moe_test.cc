// `qk pretrain-gpt` with mixture-of-experts layers and expert parallelism,
// ranks as processes under `qk run`: a tiny MoE GPT (4 experts, top-2, a
// shared expert, capacity factor 1.0 so the capacity drops routes, the
// load-balancing and z losses on) trains at EP=2 (allgather and alltoall
// dispatchers, the distributed optimizer), EP=2 x DP=2, EP=2 x TP=2 with
// sequence parallelism and PP=2 x EP=2 like one rank; a checkpoint saved at
// EP=2 continues at EP=1 on the uninterrupted run's losses; the expert bias
// (aux-loss-free balancing) moves the same at EP=2 as on one rank; the seed's
// whole MOE_ARGS and TRAINING_ARGS (MLA, recompute, virtual pipeline stages,
// the distributed optimizer) train at PP=2 x EP=2.
//
// Tolerances as pretrain_gpt_parallel_test.cc's (f32; the expert-parallel
// layouts sum the same products in another order): losses per step within
// a relative 1e-5 (measured: 3e-8; TP=2 6e-8), grad norms 1e-4 (measured
// 4e-8; TP=2 9e-7); final weights and optimizer state per tensor within a
// relative 1e-4 and 3e-4 absolute per entry.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "cli/pretrain_runs.h"
#include "cli/run_qk.h"
#include "common/scratch_dir.h"
#include "common/argv.h"
#include "qk/base/file_io.h"
#include "qk/nn/safetensors.h"
#include "recipes/megatron_args_test_util.h"

namespace {

namespace fs = std::filesystem;
using qk::test::Argv;
using qk::test::operator+;
using qk::test::run_qk;

const qk::test::ScratchRoot kScratch("pretrain_gpt_moe");

// 2 MoE layers of 4 experts (top-2, width 64) and a shared expert (64),
// hidden 64, sequence 32; capacity factor 1.0 drops routes; aux and z losses.
Argv tiny_moe() {
  return {"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
          "--max-position-embeddings", "32", "--position-embedding-type", "rope", "--normalization", "RMSNorm",
          "--swiglu", "--disable-bias-linear", "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size",
          "4095", "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "10", "--lr", "3e-3",
          "--log-interval", "1", "--eval-interval", "5", "--eval-iters", "1", "--attention-dropout", "0",
          "--hidden-dropout", "0", "--num-experts", "4", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "64",
          "--moe-shared-expert-intermediate-size", "64", "--moe-expert-capacity-factor", "1.0",
          "--moe-aux-loss-coeff", "1e-2", "--moe-z-loss-coeff", "1e-3", "--moe-per-layer-logging"};
}

qk::test::RunResult one_rank(const Argv& args) { return qk::test::pretrain_one_rank(args); }
qk::test::RunResult ranks(int n, const Argv& args) { return qk::test::pretrain_ranks(n, args); }
using qk::test::metrics;

// The shared loss comparison, and the MoE losses (over every rank's tokens) as closely.
void expect_same_losses(const std::string& ref, const std::string& got, int64_t from, int64_t to) {
  qk::test::expect_same_losses(ref, got, from, to);
  const auto a = metrics(ref, "train"), b = metrics(got, "train");
  for (int64_t i = from; i <= to; ++i) {
    if (!a.count(i) || !b.count(i)) continue;  // reported by the shared comparison
    for (const char* moe : {"load_balancing_loss", "z_loss"}) {
      ASSERT_TRUE(a.at(i).contains(moe) && b.at(i).contains(moe)) << moe << " at iteration " << i;
      const double mx = a.at(i)[moe], my = b.at(i)[moe];
      EXPECT_NEAR(my, mx, 1e-5 * mx) << moe << " at iteration " << i;
    }
  }
}

// Whole tensors by name: every expert of the EP run's checkpoint is there,
// and the optimizer groups count every expert.
void expect_close_tensors(const std::string& ref_file, const std::string& got_file) {
  qk::test::expect_close_tensors(ref_file, got_file);
  const qk::nn::SafetensorsFile a = qk::nn::load_safetensors(ref_file), b = qk::nn::load_safetensors(got_file);
  for (const auto& [k, v] : a.metadata) {
    if (k.rfind("group.", 0) == 0) {
      EXPECT_EQ(b.metadata.at(k), v) << k;
    }
  }
}

// The one-rank run every layout is compared with (run once).
const std::string& single_rank_run() {
  static const std::string dir = [] {
    const std::string d = kScratch.fresh("one");
    const auto r = one_rank(tiny_moe() + Argv{"--save", d, "--save-interval", "100"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return d;
  }();
  return dir;
}

std::string expect_layout_equals_one_rank(int nranks, const Argv& layout, const std::string& name) {
  const std::string one = single_rank_run();
  const std::string dir = kScratch.fresh(name);
  const auto r = ranks(nranks, tiny_moe() + layout + Argv{"--save", dir, "--save-interval", "100"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  expect_same_losses(one, dir, 1, 10);
  expect_close_tensors(one + "/iter_0000000010/model.safetensors", dir + "/iter_0000000010/model.safetensors");
  expect_close_tensors(one + "/iter_0000000010/optim.safetensors", dir + "/iter_0000000010/optim.safetensors");
  return r.output;
}

TEST(PretrainGptMoe, OneRankLogsTheMoeLossesPerLayerStatisticsAndTheExpertLoad) {
  const std::string one = single_rank_run();
  const std::string dir = kScratch.fresh("log");
  const auto r = one_rank(tiny_moe() + Argv{"--train-iters", "2", "--save", dir, "--save-interval", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Megatron's track_moe_metrics names, after lm loss in the iteration line.
  EXPECT_TRUE(std::regex_search(r.output, std::regex("lm loss: [0-9.E+-]+ \\| load_balancing_loss: 1\\.0[0-9]+E-02 "
                                                     "\\| z_loss: [0-9.]+E-0[23] \\|")))
      << r.output;
  // --moe-per-layer-logging: each MoE layer's kept routes (8 sequences x 32
  // tokens x top-2 = 512, less the dropped ones) and the capacity's drops.
  const std::regex layer(" \\[qk\\] MoE layer ([12]) \\| load_balancing_loss: [0-9.E+-]+ \\| z_loss: [0-9.E+-]+ \\| "
                         "tokens per expert: \\[(\\d+), (\\d+), (\\d+), (\\d+)\\] \\| dropped routes: (\\d+) \\|");
  int layers = 0;
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), layer); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    int64_t kept = 0;
    for (int e = 2; e <= 5; ++e) kept += std::stoll(m[e].str());
    EXPECT_EQ(kept + std::stoll(m[6].str()), 512) << m[0];
    EXPECT_GT(std::stoll(m[6].str()), 0) << "capacity factor 1.0 drops routes: " << m[0];
    ++layers;
  }
  EXPECT_EQ(layers, 2 * 2) << r.output;  // 2 layers x 2 iterations
  // The same statistics, one JSON line per layer and log.
  std::ifstream jsonl(dir + "/moe_metrics.jsonl");
  int records = 0;
  for (std::string line; std::getline(jsonl, line); ++records) {
    const auto j = nlohmann::json::parse(line);
    double kept = 0;
    for (double t : j.at("tokens_per_expert").get<std::vector<double>>()) kept += t;
    EXPECT_EQ(kept + j.at("dropped_routes").get<double>(), 512.0) << line;
    EXPECT_GT(j.at("load_balancing_loss").get<double>(), 0.0) << line;
  }
  EXPECT_EQ(records, 2 * 2);
  EXPECT_GT(fs::file_size(one + "/moe_expert_load.png"), 1000u);
  EXPECT_NE(r.output.find("moe_expert_load.png"), std::string::npos);
}

TEST(PretrainGptMoe, ExpertParallelTwoEqualsOneRank) {
  const std::string out = expect_layout_equals_one_rank(2, {"--expert-model-parallel-size", "2"}, "ep2");
  EXPECT_NE(out.find("load_balancing_loss: "), std::string::npos) << out;
}

TEST(PretrainGptMoe, ExpertParallelTwoWithAlltoallAndTheDistributedOptimizerEqualsOneRank) {
  expect_layout_equals_one_rank(2,
                                {"--expert-model-parallel-size", "2", "--moe-token-dispatcher-type", "alltoall",
                                 "--use-distributed-optimizer", "--overlap-grad-reduce"},
                                "ep2_alltoall_do");
}

TEST(PretrainGptMoe, ExpertTwoCarvedFromDataTwoOnFourRanksEqualsOneRank) {
  expect_layout_equals_one_rank(
      4,
      {"--expert-model-parallel-size", "2", "--moe-token-dispatcher-type", "alltoall", "--use-distributed-optimizer"},
      "ep2_dp2");
}

TEST(PretrainGptMoe, ExpertTwoTimesTensorTwoWithSequenceParallelEqualsOneRank) {
  expect_layout_equals_one_rank(
      4, {"--expert-model-parallel-size", "2", "--tensor-model-parallel-size", "2", "--sequence-parallel"},
      "ep2_tp2");
}

TEST(PretrainGptMoe, PipelineTwoTimesExpertTwoEqualsOneRank) {
  expect_layout_equals_one_rank(4, {"--pipeline-model-parallel-size", "2", "--expert-model-parallel-size", "2"},
                                "pp2_ep2");
}

// DeepSeek-V3's aux-loss-free balancing: the expert bias moves after every
// step on every rank's token counts, the same at EP=2 as on one rank.
TEST(PretrainGptMoe, ExpertBiasUpdatesAtExpertTwoAsOnOneRank) {
  const Argv bias = {"--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias",
                     "--moe-router-bias-update-rate", "1e-2", "--train-iters", "4"};
  const std::string one = kScratch.fresh("bias_one"), two = kScratch.fresh("bias_ep2");
  const auto a = one_rank(tiny_moe() + bias + Argv{"--save", one, "--save-interval", "4"});
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const auto b = ranks(2, tiny_moe() + bias + Argv{"--save", two, "--save-interval", "4",
                                                   "--expert-model-parallel-size", "2",
                                                   "--moe-token-dispatcher-type", "alltoall"});
  ASSERT_EQ(b.exit_code, 0) << b.output;
  expect_same_losses(one, two, 1, 4);
  const qk::nn::SafetensorsFile x = qk::nn::load_safetensors(one + "/iter_0000000004/model.safetensors");
  const qk::nn::SafetensorsFile y = qk::nn::load_safetensors(two + "/iter_0000000004/model.safetensors");
  for (const char* name : {"decoder.layers.0.mlp.router.expert_bias", "decoder.layers.1.mlp.router.expert_bias"}) {
    ASSERT_TRUE(x.tensors.count(name) && y.tensors.count(name)) << name;
    const std::vector<float> u = x.tensors.at(name).to_vector<float>(), v = y.tensors.at(name).to_vector<float>();
    EXPECT_EQ(u, v) << name;
    double moved = 0;
    for (float f : u) moved += std::abs(f);
    EXPECT_GT(moved, 0.0) << name << " never moved";
  }
}

TEST(PretrainGptMoe, CheckpointSavedAtExpertTwoContinuesAtOneRank) {
  const std::string one = single_rank_run();
  const std::string dir = kScratch.fresh("ep2_to_1");
  const Argv save = Argv{"--save", dir, "--save-interval", "5"};
  auto a = ranks(2, tiny_moe() + save + Argv{"--expert-model-parallel-size", "2", "--use-distributed-optimizer",
                                             "--exit-interval", "5"});
  ASSERT_EQ(a.exit_code, 0) << a.output;
  {
    // As if a run killed after iteration 7 had logged 6 and 7 past the
    // checkpoint, the last line cut short: the resumed run must not keep them.
    std::ofstream jsonl(dir + "/moe_metrics.jsonl", std::ios::app);
    for (int it : {6, 7})
      for (int layer : {1, 2})
        jsonl << nlohmann::json{{"iteration", it}, {"layer", layer}, {"dropped_routes", -1}}.dump() << "\n";
    jsonl << "{\"iteration\": 8, \"lay";
  }
  auto b = one_rank(tiny_moe() + save + Argv{"--load", dir});
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("successfully loaded checkpoint from " + dir + "/iter_0000000005"), std::string::npos)
      << b.output;
  expect_same_losses(one, dir, 6, 10);
  // Each iteration's MoE statistics once per layer, none of the stale ones.
  std::map<std::pair<int64_t, int64_t>, int> seen;
  std::ifstream jsonl(dir + "/moe_metrics.jsonl");
  for (std::string line; std::getline(jsonl, line);) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_GE(j.at("dropped_routes").get<double>(), 0.0) << "a stale line was kept: " << line;
    ++seen[{j.at("iteration").get<int64_t>(), j.at("layer").get<int64_t>()}];
  }
  EXPECT_EQ(seen.size(), 10u * 2u);
  for (const auto& [key, count] : seen) EXPECT_EQ(count, 1) << "iteration " << key.first << " layer " << key.second;
}

// Expert parallel 2 with the distributed optimizer, a checkpoint every 3
// iterations: rank 1 is SIGKILLed at iteration 5 under `qk run
// --max-restarts`; the job restarts from iteration 3 and ends with the
// uninterrupted run's weights and optimizer state bit for bit, and
// moe_metrics.jsonl holds each iteration's statistics once.
TEST(PretrainGptMoe, KilledRankOfExpertTwoResumesBitIdentical) {
  const auto args = [](const std::string& dir) {
    return tiny_moe() + Argv{"--train-iters", "8", "--expert-model-parallel-size", "2", "--use-distributed-optimizer",
                             "--save", dir, "--load", dir, "--save-interval", "3"};
  };
  const std::string ref = kScratch.fresh("kill_ref"), killed = kScratch.fresh("kill");
  const std::string job = "run --nproc-per-node 2 --max-restarts 2 -- '" + std::string(QK_BIN) + "' pretrain-gpt";
  auto r = run_qk(job + qk::test::shell_words(args(ref)));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto k = run_qk(job + qk::test::shell_words(args(killed)), "QK_FAULT_KILL=step:1:5");
  ASSERT_EQ(k.exit_code, 0) << k.output;
  EXPECT_NE(k.output.find("rank 1 (local rank 1 on node 0"), std::string::npos) << k.output;
  EXPECT_NE(k.output.find("successfully loaded checkpoint from " + killed + "/iter_0000000003"), std::string::npos)
      << k.output;
  for (const char* f : {"/iter_0000000008/model.safetensors", "/iter_0000000008/optim.safetensors"}) {
    const std::string want = qk::read_file(ref + f);
    ASSERT_FALSE(want.empty()) << f;
    EXPECT_TRUE(qk::read_file(killed + f) == want) << f << " differs from the uninterrupted run's\n" << k.output;
  }
  std::map<std::pair<int64_t, int64_t>, int> seen;
  std::ifstream jsonl(killed + "/moe_metrics.jsonl");
  for (std::string line; std::getline(jsonl, line);) {
    const auto j = nlohmann::json::parse(line);
    ++seen[{j.at("iteration").get<int64_t>(), j.at("layer").get<int64_t>()}];
  }
  EXPECT_EQ(seen.size(), 8u * 2u);
  for (const auto& [key, count] : seen) EXPECT_EQ(count, 1) << "iteration " << key.first << " layer " << key.second;
}

TEST(PretrainGptMoe, ExpertTensorSizeOtherThanTheTensorSizeIsRefused) {
  const auto r = ranks(2, tiny_moe() + Argv{"--tensor-model-parallel-size", "2", "--sequence-parallel",
                                            "--expert-tensor-parallel-size", "1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--expert-tensor-parallel-size 1: an expert tensor-parallel size other than the tensor "
                          "size is not built yet"),
            std::string::npos)
      << r.output;
}

// The seed's MOE_ARGS and TRAINING_ARGS whole (MLA, full recompute, virtual
// pipeline stages of 2 layers, the distributed optimizer with overlapped
// reduction, the shared experts' overlap, grouped GEMM, seq_aux_loss, the
// device-level capacity and losses, bf16), CI-sized: 4 layers (the first
// dense, as --moe-layer-freq's pattern), hidden 64. Virtual stages need a
// pipeline and EP_SIZE 2 two data-parallel ranks: PP=2 x EP=2 on 4 ranks.
TEST(PretrainGptMoe, SeedMoeAndTrainingArgsTrainAtPipelineTwoTimesExpertTwo) {
  const qk::test::SeedFlags s = qk::test::load_seed_flags();
  const Argv seed = qk::test::expand_array(s.arrays.at("MODEL_ARGS")) +
                    qk::test::expand_array(s.arrays.at("MOE_ARGS")) +
                    qk::test::expand_array(s.arrays.at("TRAINING_ARGS")) +
                    qk::test::expand_array(s.arrays.at("REGULARIZATION_ARGS")) +
                    qk::test::expand_array(s.arrays.at("LEARNING_RATE_ARGS")) +
                    qk::test::expand_array(s.arrays.at("MODEL_PARALLEL_ARGS")) +
                    qk::test::expand_array(s.arrays.at("MIXED_PRECISION_ARGS"));
  // argparse keeps the last value: CI sizes after the seed's.
  const Argv shrink = {"--num-layers", "4", "--moe-layer-freq", "([0]*1+[1]*3)", "--hidden-size", "64",
                       "--ffn-hidden-size", "128", "--moe-ffn-hidden-size", "64",
                       "--moe-shared-expert-intermediate-size", "64", "--num-attention-heads", "4", "--seq-length",
                       "32", "--max-position-embeddings", "32", "--micro-batch-size", "2", "--global-batch-size", "8",
                       "--train-iters", "3", "--lr-warmup-iters", "1", "--lr", "3e-4", "--vocab-size", "4095",
                       "--eval-iters", "1", "--eval-interval", "3", "--log-interval", "1",
                       "--pipeline-model-parallel-size", "2", "--mock-data", "--tokenizer-type", "NullTokenizer"};
  const std::string dir = kScratch.fresh("seed");
  const auto r = ranks(4, seed + shrink + Argv{"--save", dir, "--save-interval", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("iteration        3/       3 |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("load_balancing_loss: "), std::string::npos) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\n\\[rank0\\]:   multi_latent_attention \\.+ True\n")))
      << r.output;
  // Every expert of the 3 MoE layers (layer 1 is dense) in the checkpoint, by its global index.
  const qk::nn::SafetensorsFile w = qk::nn::load_safetensors(dir + "/iter_0000000003/model.safetensors");
  EXPECT_EQ(w.tensors.count("decoder.layers.0.mlp.linear_fc1.weight"), 1u);
  for (int layer = 1; layer < 4; ++layer)
    for (int e = 0; e < 4; ++e)
      EXPECT_EQ(w.tensors.count("decoder.layers." + std::to_string(layer) + ".mlp.experts.local_experts." +
                                std::to_string(e) + ".linear_fc1.weight"),
                1u)
          << layer << " " << e;
  EXPECT_EQ(w.tensors.count("decoder.layers.1.self_attention.linear_kv_down_proj.weight"), 1u);
}

}  // namespace
