// `qk pretrain-gpt` with tensor and sequence parallelism, ranks as processes
// under `qk run`: TP=2, TP=2 with SP and TP=2 x DP=2 train like one rank; a
// checkpoint saved at TP=2 continues at TP=1 and at TP=2 x DP=2 on the
// uninterrupted run's losses; a SIGKILLed rank of a TP=2 x DP=2 run resumes
// bit-identically; sizes that do not split are errors naming the flags.
// Pipeline parallelism: PP=2, PP=4, PP=2 x TP=2 (SP), PP=2 x DP=2 (plain,
// distributed optimizer, overlapped reductions), the interleaved schedule
// (also x DP=2 with the distributed optimizer) and uneven stages train like
// one rank, moving the formula's point-to-point bytes; full recompute in the
// chunks changes nothing; a checkpoint saved at PP=2 continues at PP=1 and
// TP=2, one saved at PP=4 at PP=2 with virtual stages; a SIGKILLed rank of
// PP=2 x TP=2 resumes bit-identically; sizes that do not fit are refused
// naming flags.
//
// Tolerances (f32; the shards add their products and the vocabulary-parallel
// softmax its sums in another order): losses per step within a relative
// 1e-5 (measured: about 1e-7), grad norms 1e-4; final weights after 10 AdamW
// steps at lr 3e-3 within a relative 1e-4 per tensor (Frobenius; measured
// 2e-5) and 3e-4 absolute per entry (a tenth of one step; measured 3e-5:
// Adam turns the rounding of a near-zero gradient into up to a whole step).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "cli/pretrain_runs.h"
#include "cli/run_qk.h"
#include "common/scratch_dir.h"
#include "common/argv.h"
#include "qk/base/file_io.h"
#include "qk/nn/safetensors.h"

namespace {

namespace fs = std::filesystem;
using qk::test::run_qk;
using qk::test::Argv;
using qk::test::operator+;

const qk::test::ScratchRoot kScratch("pretrain_gpt_parallel");

std::string fresh_dir(const std::string& name) { return kScratch.fresh(name); }
std::string scratch(const std::string& name) { return (kScratch.root() / name).string(); }

// 2 layers, hidden 64, 4 heads, SwiGLU width 128, sequence 32, mock data.
// --vocab-size 4095 (4096 ids with eod) pads to 4096 rows at tensor sizes 1,
// 2 and 4, so every layout starts from the same full weights.
Argv tiny(const std::string& vocab = "4095") {
  return {"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
          "--max-position-embeddings", "32", "--position-embedding-type", "rope", "--normalization", "RMSNorm",
          "--swiglu", "--disable-bias-linear", "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size",
          vocab, "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "10", "--lr", "3e-3",
          "--log-interval", "1", "--eval-interval", "5", "--eval-iters", "1", "--attention-dropout", "0",
          "--hidden-dropout", "0"};
}

qk::test::RunResult one_rank(const Argv& args) { return qk::test::pretrain_one_rank(args); }
qk::test::RunResult ranks(int n, const Argv& args, const std::string& env = "") {
  return qk::test::pretrain_ranks(n, args, env);
}
using qk::test::expect_same_losses;
using qk::test::metrics;
// The final checkpoints' weights, tensor by tensor (see the tolerances at the top).
void expect_close_weights(const std::string& ref_file, const std::string& got_file) {
  qk::test::expect_close_tensors(ref_file, got_file);
}

// The single-rank run every layout is compared with (run once).
const std::string& single_rank_run() {
  static const std::string dir = [] {
    const std::string d = fresh_dir("one");
    const auto r = one_rank(tiny() + Argv{"--save", d, "--save-interval", "100"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return d;
  }();
  return dir;
}

// `base` + `layout` on nranks ranks against the one-rank run `one` of `base`
// (in the folder `name`; `env` for the ranks).
void expect_layout_equals(const Argv& base, const std::string& one, int nranks, const Argv& layout,
                          const std::string& name, const std::vector<std::string>& printed,
                          const std::string& env = "") {
  const std::string dir = fresh_dir(name);
  const auto r = ranks(nranks, base + layout + Argv{"--save", dir, "--save-interval", "100"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const auto& p : printed) EXPECT_NE(r.output.find(p), std::string::npos) << p << "\n" << r.output;
  expect_same_losses(one, dir, 1, 10);
  const auto va = metrics(one, "valid"), vb = metrics(dir, "valid");
  ASSERT_EQ(vb.size(), 2u);
  for (const auto& [it, v] : va)
    EXPECT_NEAR(vb.at(it)["lm loss"].get<double>(), v["lm loss"].get<double>(), 1e-5 * v["lm loss"].get<double>());
  expect_close_weights(one + "/iter_0000000010/model.safetensors", dir + "/iter_0000000010/model.safetensors");
  expect_close_weights(one + "/iter_0000000010/optim.safetensors", dir + "/iter_0000000010/optim.safetensors");
}

void expect_layout_equals_one_rank(int nranks, const Argv& layout, const std::string& name,
                                   const std::vector<std::string>& printed) {
  expect_layout_equals(tiny(), single_rank_run(), nranks, layout, name, printed);
}

// tiny() with 4 layers, for pipelines of 4 stages or 2 stages of 2 virtual
// stages (run once).
Argv tiny4() { return tiny() + Argv{"--num-layers", "4"}; }
const std::string& single_rank_run_4_layers() {
  static const std::string dir = [] {
    const std::string d = fresh_dir("one_4_layers");
    const auto r = one_rank(tiny4() + Argv{"--save", d, "--save-interval", "100"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return d;
  }();
  return dir;
}

// The traffic line's "pp" on rank 0 (the first stage) against the formula:
// per micro-batch and virtual-stage boundary one activation [micro batch,
// sequence (/ tp under SP), hidden] in the model's dtype goes forward and its
// gradient back. Rank 0's v chunks send v activations per micro-batch and
// receive v - 1 (its first chunk reads tokens), the gradients the other way:
// (4v - 2) m tensors moved, (2v - 1) m of them sent, m micro-batches per
// step. Every logged iteration (metrics.jsonl) moves exactly that.
void expect_p2p_bytes(const std::string& dir, int v, int64_t m, int64_t activation_bytes) {
  const auto train = metrics(dir, "train");
  ASSERT_EQ(train.size(), 10u) << dir;
  const double moved = static_cast<double>((4 * v - 2) * m * activation_bytes);
  const double sent = static_cast<double>((2 * v - 1) * m * activation_bytes);
  for (const auto& [it, j] : train) {
    ASSERT_TRUE(j.contains("comm/pp/bytes")) << "iteration " << it << ": no pp traffic in " << j.dump();
    EXPECT_EQ(j["comm/pp/bytes"].get<double>(), moved) << "iteration " << it;
    EXPECT_EQ(j["comm/pp/other_bytes"].get<double>(), moved) << "send and receive count as other";
    EXPECT_EQ(j["comm/pp/calls"].get<double>(), static_cast<double>((4 * v - 2) * m)) << "iteration " << it;
    // What qccl put on the wire: the payload (plus any transport framing).
    EXPECT_GE(j["comm/pp/wire_bytes_sent"].get<double>(), sent) << "iteration " << it;
    EXPECT_LE(j["comm/pp/wire_bytes_sent"].get<double>(), 1.01 * sent) << "iteration " << it;
  }
}

// tiny()'s activation: micro batch 2 x sequence 32 x hidden 64, f32.
constexpr int64_t kActivationBytes = 2 * 32 * 64 * 4;

TEST(PretrainGptParallel, TensorParallelTwoEqualsOneRank) {
  expect_layout_equals_one_rank(2, {"--tensor-model-parallel-size", "2"}, "tp2",
                                {"> parallel layout: world 2 = tp 2 x cp 1 x dp 1 x pp 1",
                                 " [qk] bytes per iteration: tp ", "(all-reduce ", "[ t 1/2, p 1/1 ]"});
}

TEST(PretrainGptParallel, SequenceParallelEqualsOneRank) {
  // Under SP the activations move as all-gathers and reduce-scatters.
  expect_layout_equals_one_rank(2, {"--tensor-model-parallel-size", "2", "--sequence-parallel"}, "sp2",
                                {" [qk] bytes per iteration: tp ", "all-gather ", "reduce-scatter "});
}

TEST(PretrainGptParallel, TensorTwoTimesDataTwoOnFourRanksEqualsOneRank) {
  expect_layout_equals_one_rank(4, {"--tensor-model-parallel-size", "2"}, "tp2dp2",
                                {"> parallel layout: world 4 = tp 2 x cp 1 x dp 2 x pp 1", " | dp "});
}

// The distributed optimizer shards each tensor-parallel rank's buckets over
// its data-parallel group: partial gradients and the norm still span both.
TEST(PretrainGptParallel, TensorTwoTimesDataTwoWithTheDistributedOptimizerEqualsOneRank) {
  expect_layout_equals_one_rank(4,
                                {"--tensor-model-parallel-size", "2", "--sequence-parallel",
                                 "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"},
                                "tp2dp2_distopt",
                                {"> parallel layout: world 4 = tp 2 x cp 1 x dp 2 x pp 1", "reduce-scatter "});
}

// Pipeline parallelism (1F1B): each stage holds some layers, the last
// stage's loss is the log's, the gradient norm spans the stages, the tied
// embedding's copy on the last stage stays equal to the first stage's (the
// checkpoint holds it once), and evaluation runs the forward-only schedule.
TEST(PretrainGptParallel, PipelineTwoEqualsOneRank) {
  expect_layout_equals_one_rank(2, {"--pipeline-model-parallel-size", "2"}, "pp2",
                                {"> parallel layout: world 2 = tp 1 x cp 1 x dp 1 x pp 2",
                                 "> pipeline layers: pp 0: [0]; pp 1: [1]", "[ t 1/1, p 1/2 ]",
                                 " [qk] bytes per iteration: pp 0.13 MB in 8 calls (other 0.13 MB), 0.07 MB sent | "
                                 "embedding 1.05 MB in 1 calls (all-reduce 1.05 MB)"});
  expect_p2p_bytes(scratch("pp2"), 1, 4, kActivationBytes);
}

// Under sequence parallelism the stages exchange [b, s / tp, h].
TEST(PretrainGptParallel, PipelineTwoTimesTensorTwoWithSequenceParallelEqualsOneRank) {
  expect_layout_equals_one_rank(4,
                                {"--pipeline-model-parallel-size", "2", "--tensor-model-parallel-size", "2",
                                 "--sequence-parallel"},
                                "pp2tp2", {"> parallel layout: world 4 = tp 2 x cp 1 x dp 1 x pp 2", "[ t 1/2, p 1/2 ]"});
  expect_p2p_bytes(scratch("pp2tp2"), 1, 4, kActivationBytes / 2);
}

TEST(PretrainGptParallel, PipelineTwoTimesDataTwoEqualsOneRank) {
  expect_layout_equals_one_rank(4, {"--pipeline-model-parallel-size", "2"}, "pp2dp2",
                                {"> parallel layout: world 4 = tp 1 x cp 1 x dp 2 x pp 2"});
}

// The distributed optimizer per stage: each stage's buffer reduce-scattered
// over its data-parallel group, the tied embedding in a bucket of its own
// (the first stage's and the last stage's copy cut alike), its averaged
// shard pieces summed over the embedding group (half the rows' bytes on
// each data-parallel rank), the norm over both stages.
TEST(PretrainGptParallel, PipelineTwoTimesDataTwoWithTheDistributedOptimizerEqualsOneRank) {
  expect_layout_equals_one_rank(4, {"--pipeline-model-parallel-size", "2", "--use-distributed-optimizer"},
                                "pp2dp2_distopt",
                                {"> parallel layout: world 4 = tp 1 x cp 1 x dp 2 x pp 2", "reduce-scatter ",
                                 " | embedding 0.52 MB in 1 calls (all-reduce 0.52 MB)"});
  expect_p2p_bytes(scratch("pp2dp2_distopt"), 1, 2, kActivationBytes);
}

// Overlapped: small buckets, each launched by the hooks of its parameters'
// last micro-batch backward (the debug line counts them on every rank),
// sharded with the parameters' all-gather overlapped too, and all-reduced
// without the distributed optimizer.
TEST(PretrainGptParallel, PipelineTwoTimesDataTwoWithOverlappedGradReduceEqualsOneRank) {
  for (const Argv& distopt : {Argv{"--use-distributed-optimizer", "--overlap-param-gather"}, Argv{}}) {
    const std::string name = distopt.empty() ? "pp2dp2_overlap" : "pp2dp2_distopt_overlap";
    const std::string dir = fresh_dir(name);
    const auto r = ranks(4,
                         tiny() + distopt +
                             Argv{"--pipeline-model-parallel-size", "2", "--overlap-grad-reduce", "--ddp-bucket-size",
                                  "20000", "--save", dir, "--save-interval", "100"},
                         "QK_LOG_LEVEL=debug");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    int lines = 0;
    for (size_t at = r.output.find(" gradient buckets launched during backward"); at != std::string::npos;
         at = r.output.find(" gradient buckets launched during backward", at + 1)) {
      const size_t start = r.output.rfind(": ", at) + 2;  // "pipeline stage S: N of M"
      int launched = -1, buckets = -1;
      ASSERT_EQ(std::sscanf(r.output.c_str() + start, "%d of %d", &launched, &buckets), 2)
          << r.output.substr(start, 80);
      EXPECT_GE(buckets, 2) << name << ": --ddp-bucket-size 20000 cuts the stage into several buckets";
      EXPECT_EQ(launched, buckets) << name << ": every bucket starts in the last micro-batch's backward";
      ++lines;
    }
    EXPECT_EQ(lines, 4 * 10) << name << ": one line per rank and step\n" << r.output;
    expect_same_losses(single_rank_run(), dir, 1, 10);
    expect_close_weights(single_rank_run() + "/iter_0000000010/model.safetensors",
                         dir + "/iter_0000000010/model.safetensors");
    expect_close_weights(single_rank_run() + "/iter_0000000010/optim.safetensors",
                         dir + "/iter_0000000010/optim.safetensors");
  }
}

TEST(PretrainGptParallel, PipelineFourEqualsOneRank) {
  expect_layout_equals(tiny4(), single_rank_run_4_layers(), 4, {"--pipeline-model-parallel-size", "4"}, "pp4",
                       {"> pipeline layers: pp 0: [0]; pp 1: [1]; pp 2: [2]; pp 3: [3]"});
}

// The interleaved schedule (2 virtual stages per rank, p2p overlapped by
// default) and uneven stages (1 layer on the first, 3 on the last).
TEST(PretrainGptParallel, InterleavedPipelineTwoByTwoVirtualStagesEqualsOneRank) {
  expect_layout_equals(tiny4(), single_rank_run_4_layers(), 2,
                       {"--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank", "2"}, "vpp2",
                       {"> pipeline layers: pp 0: [0] [2]; pp 1: [1] [3]"});
  expect_p2p_bytes(scratch("vpp2"), 2, 4, kActivationBytes);
}

// Two chunks per rank in one buffer per rank: a bucket starts once its
// parameters' last micro-batch backward ran in their own chunk.
TEST(PretrainGptParallel, InterleavedPipelineTimesDataTwoWithTheDistributedOptimizerEqualsOneRank) {
  expect_layout_equals(tiny4(), single_rank_run_4_layers(), 4,
                       {"--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank", "2",
                        "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
                        "--ddp-bucket-size", "20000"},
                       "vpp2dp2_distopt",
                       {"> parallel layout: world 4 = tp 1 x cp 1 x dp 2 x pp 2", "reduce-scatter "});
  expect_p2p_bytes(scratch("vpp2dp2_distopt"), 2, 2, kActivationBytes);
}

// Full recompute inside the chunks (uniform over groups of 1 layer, block of
// 1 layer per chunk), dropout on, changes no number: the same losses,
// gradient norms and final weights as the pipeline without it, bit for bit.
TEST(PretrainGptParallel, PipelineWithFullRecomputeEqualsWithout) {
  const Argv base = tiny4() + Argv{"--pipeline-model-parallel-size", "2", "--attention-dropout", "0.1",
                                   "--hidden-dropout", "0.1", "--save-interval", "100"};
  std::vector<std::string> dirs;
  for (const Argv& recompute :
       {Argv{}, Argv{"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"},
        Argv{"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "1"}}) {
    dirs.push_back(fresh_dir("pp2_recompute" + std::to_string(dirs.size())));
    const auto r = ranks(2, base + recompute + Argv{"--save", dirs.back()});
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const auto plain = metrics(dirs[0], "train");
  ASSERT_EQ(plain.size(), 10u);
  for (size_t k = 1; k < dirs.size(); ++k) {
    const auto got = metrics(dirs[k], "train");
    for (const auto& [it, j] : plain) {
      ASSERT_TRUE(got.count(it)) << dirs[k] << " iteration " << it;
      EXPECT_EQ(got.at(it)["lm loss"].get<double>(), j["lm loss"].get<double>()) << dirs[k] << " iteration " << it;
      EXPECT_EQ(got.at(it)["grad_norm"].get<double>(), j["grad_norm"].get<double>()) << dirs[k] << " iteration " << it;
    }
    EXPECT_TRUE(qk::read_file(dirs[k] + "/iter_0000000010/model.safetensors") ==
                qk::read_file(dirs[0] + "/iter_0000000010/model.safetensors"))
        << dirs[k];
  }
}

TEST(PretrainGptParallel, UnevenPipelineStagesEqualOneRank) {
  expect_layout_equals(tiny4(), single_rank_run_4_layers(), 2,
                       {"--pipeline-model-parallel-size", "2", "--decoder-first-pipeline-num-layers", "1"}, "uneven",
                       {"> pipeline layers: pp 0: [0]; pp 1: [1-3]"});
}

// --profile: one Chrome trace of every rank's spans in the output folder
// (forward, backward, send, recv and optimizer on both stages) and the
// measured bubble in the log, between 0 and 100%.
TEST(PretrainGptParallel, PipelineProfileWritesEveryRanksTraceAndTheBubble) {
  const std::string dir = fresh_dir("pp_profile");
  const auto r = ranks(2, tiny() + Argv{"--pipeline-model-parallel-size", "2", "--profile", "--train-iters", "4",
                                        "--log-interval", "2", "--save", dir, "--save-interval", "100"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("> --profile: the timeline of 4 step(s) of every rank is in " + dir + "/trace.json"),
            std::string::npos)
      << r.output;
  const size_t at = r.output.find(" [qk] pipeline bubble: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const double bubble = std::stod(r.output.substr(at + std::string(" [qk] pipeline bubble: ").size()));
  EXPECT_GT(bubble, 0.0);
  EXPECT_LT(bubble, 100.0);
  const auto trace = nlohmann::json::parse(qk::read_file(dir + "/trace.json"));
  std::map<int, std::set<std::string>> kinds;  // pid -> span categories
  std::set<std::string> names;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "X") kinds[e.at("pid").get<int>()].insert(e.at("cat").get<std::string>());
    if (e.at("name") == "process_name") names.insert(e.at("args").at("name").get<std::string>());
  }
  EXPECT_TRUE(names.count("rank 1 (pp 1, tp 0, dp 0)")) << trace.dump().substr(0, 2000);
  for (int pid : {0, 1})
    for (const char* k : {"forward", "backward", "send", "recv", "optimizer"})
      EXPECT_TRUE(kinds[pid].count(k)) << "rank " << pid << " has no " << k << " span";
}

// Megatron's micro-batch rule for the interleaved schedule and layers that
// do not split are errors naming the flags, before any step.
TEST(PretrainGptParallel, PipelineRefusalsNameTheFlags) {
  const Argv base = tiny4() + Argv{"--train-iters", "1", "--pipeline-model-parallel-size", "2"};
  const std::vector<std::pair<Argv, std::string>> cases = {
      {{"--num-virtual-stages-per-pipeline-rank", "2", "--global-batch-size", "6"},
       "the interleaved schedule needs the number of micro-batches (3 = --global-batch-size / "
       "(--micro-batch-size x data-parallel size)) to be a multiple of --pipeline-model-parallel-size (2)"},
      {{"--num-layers", "3"}, "--num-layers (3) must be divisible by --pipeline-model-parallel-size (2)"},
  };
  for (const auto& [flags, message] : cases) {
    const auto r = ranks(2, base + flags);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << message << "\n" << r.output;
  }
}

// Saved at PP=2 after 5 of 10 iterations, resumed at PP=1 and at TP=2: the
// checkpoint holds whole tensors by name, whatever wrote it.
TEST(PretrainGptParallel, CheckpointSavedAtPp2ContinuesAtPp1AndAtTp2) {
  const Argv args = tiny() + Argv{"--save-interval", "5"};
  const std::string ref = fresh_dir("pp_ckpt_ref"), saved = fresh_dir("pp_ckpt");
  auto r = one_rank(args + Argv{"--save", ref});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = ranks(2, args + Argv{"--pipeline-model-parallel-size", "2", "--save", saved, "--exit-interval", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::exists(saved + "/iter_0000000005/optim.safetensors")) << r.output;
  expect_same_losses(ref, saved, 1, 5);
  expect_close_weights(ref + "/iter_0000000005/model.safetensors", saved + "/iter_0000000005/model.safetensors");

  const std::string pp1 = fresh_dir("pp_ckpt_at_pp1"), tp2 = fresh_dir("pp_ckpt_at_tp2");
  fs::copy(saved, pp1, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  fs::copy(saved, tp2, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  r = one_rank(args + Argv{"--save", pp1, "--load", pp1});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("successfully loaded checkpoint from " + pp1 + "/iter_0000000005 [ t 1/1, p 1/1 ]"),
            std::string::npos)
      << r.output;
  expect_same_losses(ref, pp1, 6, 10);
  expect_close_weights(ref + "/iter_0000000010/model.safetensors", pp1 + "/iter_0000000010/model.safetensors");
  expect_close_weights(ref + "/iter_0000000010/optim.safetensors", pp1 + "/iter_0000000010/optim.safetensors");

  r = ranks(2, args + Argv{"--tensor-model-parallel-size", "2", "--save", tp2, "--load", tp2});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("at iteration 5"), std::string::npos) << r.output;
  expect_same_losses(ref, tp2, 6, 10);
  expect_close_weights(ref + "/iter_0000000010/optim.safetensors", tp2 + "/iter_0000000010/optim.safetensors");
}

// 4 layers saved at PP=4 after 5 iterations, resumed at PP=2 with 2
// virtual stages (layers 0 and 2 on rank 0): the one-rank run's losses.
TEST(PretrainGptParallel, CheckpointSavedAtPp4ContinuesAtPp2WithVirtualStages) {
  const std::string& ref = single_rank_run_4_layers();
  const std::string dir = fresh_dir("pp4_to_vpp");
  auto r = ranks(4, tiny4() + Argv{"--pipeline-model-parallel-size", "4", "--save", dir, "--save-interval", "5",
                                   "--exit-interval", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = ranks(2, tiny4() + Argv{"--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank", "2",
                              "--save", dir, "--load", dir, "--save-interval", "100"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("successfully loaded checkpoint from " + dir + "/iter_0000000005 [ t 1/1, p 1/2 ]"),
            std::string::npos)
      << r.output;
  expect_same_losses(ref, dir, 1, 10);
  expect_close_weights(ref + "/iter_0000000010/model.safetensors", dir + "/iter_0000000010/model.safetensors");
  expect_close_weights(ref + "/iter_0000000010/optim.safetensors", dir + "/iter_0000000010/optim.safetensors");
}

// Dropout on (drawn from each tensor-parallel rank's own generator, saved
// per rank), 4 ranks, a checkpoint every 3 iterations: `rank` is SIGKILLed at
// iteration 5 under `qk run --max-restarts`; the job restarts from iteration
// 3's checkpoint (`loaded`: its "[ t i/n, p j/m ]") and ends with the
// uninterrupted run's weights and optimizer state, bit for bit.
void expect_killed_rank_resumes_bit_identical(const Argv& layout, int rank, const std::string& name,
                                              const std::string& loaded) {
  const auto args = [&](const std::string& dir) {
    return tiny("4096") + layout +
           Argv{"--train-iters", "8", "--log-interval", "4", "--eval-interval", "4", "--attention-dropout", "0.1",
                "--hidden-dropout", "0.1", "--save", dir, "--load", dir, "--save-interval", "3"};
  };
  const std::string ref = fresh_dir(name + "_ref"), killed = fresh_dir(name);
  const std::string job = "run --nproc-per-node 4 --max-restarts 2 -- '" + std::string(QK_BIN) + "' pretrain-gpt";
  auto r = run_qk(job + qk::test::shell_words(args(ref)));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string who = std::to_string(rank);
  auto k = run_qk(job + qk::test::shell_words(args(killed)), "QK_FAULT_KILL=step:" + who + ":5");
  ASSERT_EQ(k.exit_code, 0) << k.output;
  EXPECT_NE(k.output.find("rank " + who + " (local rank " + who + " on node 0"), std::string::npos) << k.output;
  EXPECT_NE(k.output.find("successfully loaded checkpoint from " + killed + "/iter_0000000003 " + loaded),
            std::string::npos)
      << k.output;
  for (const char* f : {"/iter_0000000008/model.safetensors", "/iter_0000000008/optim.safetensors"}) {
    const std::string want = qk::read_file(ref + f);
    ASSERT_FALSE(want.empty()) << f;
    EXPECT_TRUE(qk::read_file(killed + f) == want) << f << " differs from the uninterrupted run's\n" << k.output;
  }
}

// Rank 3: tensor-parallel rank 1 of the last stage (each stage's generators restored).
TEST(PretrainGptParallel, KilledStageRankOfPp2TimesTp2ResumesBitIdentical) {
  expect_killed_rank_resumes_bit_identical(
      {"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"}, 3, "pp_kill", "[ t 1/2, p 1/2 ]");
}

// Rank 2: data-parallel rank 0 of the last stage, its optimizer state a
// shard of the distributed optimizer's (each shard saved and restored).
TEST(PretrainGptParallel, KilledStageRankOfPp2TimesDp2WithTheDistributedOptimizerResumesBitIdentical) {
  expect_killed_rank_resumes_bit_identical(
      {"--pipeline-model-parallel-size", "2", "--use-distributed-optimizer"}, 2, "pp_distopt_kill",
      "[ t 1/1, p 1/2 ]");
}

// Saved at TP=2 after 5 of 10 iterations, resumed at TP=1 and at TP=2 x DP=2:
// iterations 6-10 are the uninterrupted TP=1 run's. --vocab-size 4096 (4097
// ids) pads to 4224 rows at TP=1 but 4352 at TP=2: the reference gets
// --padded-vocab-size 4352, the resumed TP=1 run takes the rows from the
// checkpoint and says so.
TEST(PretrainGptParallel, CheckpointSavedAtTp2ContinuesAtTp1AndAtTp2TimesDp2) {
  const Argv args = tiny("4096") + Argv{"--save-interval", "5"};
  const std::string ref = fresh_dir("ckpt_ref"), saved = fresh_dir("ckpt_tp2");
  auto r = one_rank(args + Argv{"--padded-vocab-size", "4352", "--save", ref});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = ranks(2, args + Argv{"--tensor-model-parallel-size", "2", "--save", saved, "--exit-interval", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::exists(saved + "/iter_0000000005/optim.safetensors")) << r.output;
  expect_same_losses(ref, saved, 1, 5);

  const std::string tp1 = fresh_dir("ckpt_at_tp1"), tp2dp2 = fresh_dir("ckpt_at_tp2dp2");
  fs::copy(saved, tp1, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  fs::copy(saved, tp2dp2, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  r = one_rank(args + Argv{"--save", tp1, "--load", tp1});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("successfully loaded checkpoint from " + tp1 + "/iter_0000000005 [ t 1/1, p 1/1 ]"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("pads the vocabulary to 4352 rows"), std::string::npos) << r.output;
  expect_same_losses(ref, tp1, 6, 10);
  expect_close_weights(ref + "/iter_0000000010/model.safetensors", tp1 + "/iter_0000000010/model.safetensors");

  r = ranks(4, args + Argv{"--tensor-model-parallel-size", "2", "--save", tp2dp2, "--load", tp2dp2});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("at iteration 5"), std::string::npos) << r.output;
  expect_same_losses(ref, tp2dp2, 6, 10);
  expect_close_weights(ref + "/iter_0000000010/model.safetensors", tp2dp2 + "/iter_0000000010/model.safetensors");
  expect_close_weights(ref + "/iter_0000000010/optim.safetensors", tp2dp2 + "/iter_0000000010/optim.safetensors");
}

// Rank 1: tensor-parallel rank 1 of data-parallel group 0.
TEST(PretrainGptParallel, KilledRankOfTp2TimesDp2ResumesBitIdentical) {
  expect_killed_rank_resumes_bit_identical({"--tensor-model-parallel-size", "2"}, 1, "kill", "[ t 1/2, p 1/1 ]");
}

// Each error names the flags that do not fit, on every rank, before any step.
TEST(PretrainGptParallel, SizesThatDoNotDivideAreErrorsNamingTheFlags) {
  const Argv base = tiny() + Argv{"--train-iters", "1"};
  const std::vector<std::pair<Argv, std::string>> cases = {
      {{"--tensor-model-parallel-size", "2", "--num-attention-heads", "3", "--kv-channels", "16"},
       "--num-attention-heads (3) must be divisible by --tensor-model-parallel-size (2)"},
      {{"--tensor-model-parallel-size", "2", "--group-query-attention", "--num-query-groups", "1"},
       "--num-query-groups (1) must be divisible by --tensor-model-parallel-size (2)"},
      {{"--tensor-model-parallel-size", "2", "--ffn-hidden-size", "129"},
       "--ffn-hidden-size (129) must be divisible by --tensor-model-parallel-size (2)"},
      {{"--tensor-model-parallel-size", "2", "--padded-vocab-size", "4097"},
       "--padded-vocab-size (4097) must be divisible by --tensor-model-parallel-size (2)"},
      {{"--tensor-model-parallel-size", "2", "--sequence-parallel", "--seq-length", "31"},
       "--seq-length (31) must be divisible by --tensor-model-parallel-size (2) with --sequence-parallel"},
      {{"--tensor-model-parallel-size", "4"},
       "world size (2) is not divisible by --tensor-model-parallel-size (4)"},
  };
  for (const auto& [flags, message] : cases) {
    const auto r = ranks(2, base + flags);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << message << "\n" << r.output;
  }
  const auto r = ranks(3, base + Argv{"--tensor-model-parallel-size", "2"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("world size (3) is not divisible by --tensor-model-parallel-size (2)"), std::string::npos)
      << r.output;
}

}  // namespace
