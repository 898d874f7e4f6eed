// `qk pretrain-gpt` end to end through the binary: the repo's docs through
// `qk tokenizer train` and `qk preprocess` into a tiny GPT that learns them;
// two data-parallel ranks equal one; a rank killed with SIGKILL under
// `qk run --max-restarts` resumes to bit-identical weights; SIGTERM saves
// and exits 0; the seed's launch arrays are accepted or refused as the
// status table says; bad values and files are errors naming them.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

#include "cli/run_qk.h"
#include "common/scratch_dir.h"
#include "qk/base/file_io.h"
#include "recipes/megatron_args_test_util.h"

namespace {

namespace fs = std::filesystem;
using qk::test::Argv;
using qk::test::run_qk;
using qk::test::operator+;

const qk::test::ScratchRoot kScratch("pretrain_gpt");

std::string fresh_dir(const std::string& name) { return kScratch.fresh(name); }

// One compute thread per process: these models are tiny, and ctest runs two
// tests at once on two cores.
const std::string kOneThread = "QK_NUM_THREADS=1";

// The repo's docs/*.md, one JSON line per paragraph, through a 512-id BPE
// trained on them: "--tokenizer-type ... --data-path PREFIX".
const Argv& docs_data() {
  static const Argv args = [] {
    const std::string dir = fresh_dir("docs");
    std::string jsonl;
    for (const auto& e : fs::directory_iterator(fs::path(QK_SOURCE_DIR) / "docs")) {
      if (e.path().extension() != ".md") continue;
      const std::string text = qk::read_file(e.path().string());
      for (size_t p = 0; p < text.size();) {
        size_t q = text.find("\n\n", p);
        if (q == std::string::npos) q = text.size();
        if (q > p) jsonl += nlohmann::json({{"text", text.substr(p, q - p)}}).dump() + "\n";
        p = q + 2;
      }
    }
    qk::atomic_write_file(dir + "/docs.jsonl", jsonl);
    auto r = run_qk("tokenizer train --vocab-size 512 --input '" + dir + "/docs.jsonl' --output '" + dir +
                    "/tok.json'");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    r = run_qk("preprocess --input '" + dir + "/docs.jsonl' --output-prefix '" + dir +
               "/docs' --tokenizer-type HuggingFaceTokenizer --tokenizer-model '" + dir +
               "/tok.json' --append-eod --workers 2 -q");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return Argv{"--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", dir + "/tok.json", "--data-path",
                dir + "/docs_text_document"};
  }();
  return args;
}

// 2 layers, hidden 64, 4 heads: the size of a CI test.
Argv tiny_model(int seq = 64) {
  const std::string s = std::to_string(seq);
  return {"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", s,
          "--max-position-embeddings", s, "--position-embedding-type", "rope", "--normalization", "RMSNorm",
          "--swiglu", "--disable-bias-linear"};
}
Argv mock_data() { return {"--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "4096"}; }

std::vector<nlohmann::json> metrics(const std::string& path, const std::string& kind) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["kind"] == kind) out.push_back(j);
  }
  return out;
}

// The value of "KEY value: X" in the last validation line that has PREFIX.
double validation_loss(const std::string& log, const std::string& prefix) {
  const size_t at = log.rfind(" validation loss at " + prefix + " |");
  if (at == std::string::npos) return std::nan("");
  const size_t v = log.find("lm loss value: ", at);
  return std::stod(log.substr(v + 15));
}

TEST(PretrainGptCli, TinyGptLearnsTheDocs) {
  const std::string out = fresh_dir("learn");
  const auto r = run_qk("pretrain-gpt" +
                        qk::test::shell_words(tiny_model() + docs_data() +
                             Argv{"--split", "90,10,0", "--micro-batch-size", "4", "--global-batch-size", "8",
                                  "--train-iters", "60", "--lr", "3e-3", "--min-lr", "3e-4", "--lr-decay-style",
                                  "cosine", "--lr-warmup-iters", "5", "--attention-dropout", "0", "--hidden-dropout",
                                  "0", "--eval-interval", "10", "--eval-iters", "4", "--log-interval", "10", "--save",
                                  out + "/ckpt", "--save-interval", "30", "--log-throughput"}),
                        kOneThread);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Validation loss at the end: below the first evaluation's (each evaluation
  // reads the next validation batches, as Megatron's iterator does), and well
  // below the initial loss, a uniform guess over 512 ids (6.24).
  const double early = validation_loss(r.output, "iteration 10");
  const double last = validation_loss(r.output, "iteration 60 on validation set");
  EXPECT_LT(last, early - 0.15) << r.output;
  EXPECT_LT(last, std::log(512.0) - 0.6) << r.output;
  EXPECT_EQ(r.output.find("on test set"), std::string::npos) << "a zero test split has no test set";
  // Megatron's iteration line, and qianka's throughput line after it.
  const std::regex line(
      R"( \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] iteration +60/ +60 \| consumed samples: +480 \| elapsed time per iteration \(ms\): [\d.]+ \| throughput per GPU \(TFLOP/s/GPU\): [\d.]+ \| learning rate: 3\.000000E-04 \| global batch size: +8 \| lm loss: \d\.\d{6}E\+00 \| loss scale: 1\.0 \| grad norm: [\d.]+ \| number of skipped iterations: +0 \| number of nan iterations: +0 \|\n \[qk\] tokens/s: \d+ \(\d+ per rank\) \| achieved TFLOP/s per rank: [\d.]+ \| MFU: [\d.]+% of the measured GEMM peak \([\d.]+ TFLOP/s per rank\) \| peak memory \(RSS\): [\d.]+ GiB \|)");
  EXPECT_TRUE(std::regex_search(r.output, line)) << r.output;
  EXPECT_NE(r.output.find("-- arguments --"), std::string::npos);
  EXPECT_NE(r.output.find("> GEMM peak: "), std::string::npos);
  // Checkpoints at 30 and 60, the JSONL metrics and the PNG curves.
  EXPECT_TRUE(fs::exists(out + "/ckpt/iter_0000000030/model.safetensors"));
  EXPECT_TRUE(fs::exists(out + "/ckpt/iter_0000000060/optim.safetensors"));
  EXPECT_EQ(qk::read_file(out + "/ckpt/latest_checkpointed_iteration.txt"), "60\n");
  const auto train = metrics(out + "/ckpt/metrics.jsonl", "train");
  ASSERT_EQ(train.size(), 6u);
  EXPECT_GT(train[0]["lm loss"].get<double>(), train[5]["lm loss"].get<double>() + 0.6);
  EXPECT_EQ(metrics(out + "/ckpt/metrics.jsonl", "valid").size(), 6u);
  const std::string png = qk::read_file(out + "/ckpt/training_curves.png");
  EXPECT_EQ(png.substr(1, 3), "PNG");
}

// Two ranks of 2 x 2 micro-batches take the same steps as one rank of 4 x 2
// (the same global batch of mock samples); the losses agree to float
// rounding of the summation order.
TEST(PretrainGptCli, TwoRanksEqualOneRank) {
  const Argv args = tiny_model(32) + mock_data() +
                    Argv{"--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "12", "--lr", "3e-3",
                         "--log-interval", "1", "--eval-interval", "6", "--eval-iters", "2", "--attention-dropout", "0",
                         "--hidden-dropout", "0", "--save-interval", "100"};
  const std::string one = fresh_dir("dp1"), two = fresh_dir("dp2");
  auto r1 = run_qk("pretrain-gpt" + qk::test::shell_words(args + Argv{"--save", one}), kOneThread);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  auto r2 = run_qk("run --nproc-per-node 2 -- " + std::string(QK_BIN) + " pretrain-gpt" +
                   qk::test::shell_words(args + Argv{"--save", two}));
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  const auto a = metrics(one + "/metrics.jsonl", "train"), b = metrics(two + "/metrics.jsonl", "train");
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i]["lm loss"], y = b[i]["lm loss"];
    EXPECT_NEAR(x, y, 1e-4 * std::abs(x)) << "iteration " << i + 1;
    EXPECT_NEAR(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>(), 1e-3) << "iteration " << i + 1;
  }
  EXPECT_GT(a[0]["lm loss"].get<double>(), a[11]["lm loss"].get<double>());
  const auto va = metrics(one + "/metrics.jsonl", "valid"), vb = metrics(two + "/metrics.jsonl", "valid");
  ASSERT_EQ(va.size(), 2u);
  ASSERT_EQ(vb.size(), 2u);
  EXPECT_NEAR(va[1]["lm loss"].get<double>(), vb[1]["lm loss"].get<double>(), 1e-4);
}

// --use-distributed-optimizer with both overlaps on 2 ranks (several
// buckets, shards cut across parameters) takes the same steps as one rank
// without it; its checkpoint, sharded state gathered by name, resumes on
// one rank without it and continues the same curve. The 2-rank run saves
// with --async-save (written in the background, on disk before it exits).
TEST(PretrainGptCli, DistributedOptimizerOnTwoRanksEqualsOneRankAndResumesWithoutIt) {
  const Argv args = tiny_model(32) + mock_data() +
                    Argv{"--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "12", "--lr", "3e-3",
                         "--log-interval", "1", "--eval-interval", "100", "--eval-iters", "1", "--attention-dropout",
                         "0", "--hidden-dropout", "0", "--save-interval", "100"};
  const Argv distributed = {"--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
                            "--ddp-bucket-size", "40000", "--log-params-norm"};
  const std::string one = fresh_dir("distopt1"), two = fresh_dir("distopt2"), resumed = fresh_dir("distopt_resumed");
  auto r1 = run_qk("pretrain-gpt" + qk::test::shell_words(args + Argv{"--save", one}), kOneThread);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  auto r2 = run_qk("run --nproc-per-node 2 -- " + std::string(QK_BIN) + " pretrain-gpt" +
                   qk::test::shell_words(args + distributed + Argv{"--save", two, "--exit-interval", "6", "--async-save"}));
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  EXPECT_NE(r2.output.find("Theoretical memory footprints: weight and optimizer="), std::string::npos) << r2.output;
  EXPECT_NE(r2.output.find("the last two sharded over 2 data-parallel ranks"), std::string::npos) << r2.output;
  EXPECT_NE(r2.output.find("[Rank 0] (after 1 iterations) memory (MB) | allocated: "), std::string::npos) << r2.output;
  auto r3 = run_qk("pretrain-gpt" + qk::test::shell_words(args + Argv{"--load", two, "--save", resumed}), kOneThread);
  ASSERT_EQ(r3.exit_code, 0) << r3.output;
  const auto a = metrics(one + "/metrics.jsonl", "train"), b = metrics(two + "/metrics.jsonl", "train"),
             c = metrics(resumed + "/metrics.jsonl", "train");
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 6u);
  ASSERT_EQ(c.size(), 6u);
  for (size_t i = 0; i < 12; ++i) {
    const auto& other = i < 6 ? b[i] : c[i - 6];
    const double x = a[i]["lm loss"], y = other["lm loss"];
    EXPECT_NEAR(x, y, 1e-4 * std::abs(x)) << "iteration " << i + 1;
    EXPECT_NEAR(a[i]["grad_norm"].get<double>(), other["grad_norm"].get<double>(), 1e-3) << "iteration " << i + 1;
  }
}

// Activation recompute changes no number: the same losses and gradient
// norms, dropout on, with full (uniform, block) and selective recompute.
TEST(PretrainGptCli, RecomputeGivesTheSameSteps) {
  const Argv args = tiny_model(32) + mock_data() +
                    Argv{"--num-layers", "3", "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters",
                         "4", "--lr", "3e-3", "--log-interval", "1", "--eval-interval", "100", "--eval-iters", "1",
                         "--save-interval", "100"};
  std::vector<std::vector<nlohmann::json>> runs;
  for (const Argv& recompute :
       {Argv{}, Argv{"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "2"},
        Argv{"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "1"},
        Argv{"--recompute-activations"}}) {
    const std::string dir = fresh_dir("recompute" + std::to_string(runs.size()));
    auto r = run_qk("pretrain-gpt" + qk::test::shell_words(args + recompute + Argv{"--save", dir}), kOneThread);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    runs.push_back(metrics(dir + "/metrics.jsonl", "train"));
    ASSERT_EQ(runs.back().size(), 4u);
  }
  for (size_t k = 1; k < runs.size(); ++k)
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(runs[0][i]["lm loss"].get<double>(), runs[k][i]["lm loss"].get<double>()) << k << " " << i;
      EXPECT_EQ(runs[0][i]["grad_norm"].get<double>(), runs[k][i]["grad_norm"].get<double>()) << k << " " << i;
    }
  auto flash = run_qk(
      "pretrain-gpt" + qk::test::shell_words(args + Argv{"--recompute-granularity", "selective", "--use-flash-attn",
                                                         "--save", fresh_dir("recompute_flash")}),
      kOneThread);
  ASSERT_EQ(flash.exit_code, 0) << flash.output;
  EXPECT_NE(flash.output.find("with --use-flash-attn: the flash kernel keeps no attention matrix"), std::string::npos)
      << flash.output;
}

// Checkpoints every 3 iterations; dropout on, so the restored random state matters too.
Argv resume_args(const std::string& dir) {
  return tiny_model(32) + mock_data() +
         Argv{"--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "12", "--lr", "3e-3",
              "--log-interval", "3", "--eval-interval", "6", "--eval-iters", "1", "--save", dir, "--load", dir,
              "--save-interval", "3"};
}

// A rank SIGKILLed twice (by the fault points, as `kill -9` would) under
// `qk run --max-restarts`: each restart resumes from the newest checkpoint
// (data position from its consumed samples) and the final weights are the
// uninterrupted run's, bit for bit.
TEST(PretrainGptCli, KilledRankResumesBitIdentical) {
  const std::string ref = fresh_dir("resume_ref"), killed = fresh_dir("resume_killed");
  const std::string job = "run --nproc-per-node 2 --max-restarts 3 -- " + std::string(QK_BIN) + " pretrain-gpt";
  auto r = run_qk(job + qk::test::shell_words(resume_args(ref)));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto k = run_qk(job + qk::test::shell_words(resume_args(killed)), "QK_FAULT_KILL=step:1:5,step:0:10");
  ASSERT_EQ(k.exit_code, 0) << k.output;
  EXPECT_NE(k.output.find("successfully loaded checkpoint from " + killed + "/iter_0000000003"), std::string::npos)
      << k.output;
  EXPECT_NE(k.output.find("successfully loaded checkpoint from " + killed + "/iter_0000000009"), std::string::npos)
      << k.output;
  const std::string final_ref = qk::read_file(ref + "/iter_0000000012/model.safetensors");
  ASSERT_FALSE(final_ref.empty());
  EXPECT_TRUE(qk::read_file(killed + "/iter_0000000012/model.safetensors") == final_ref)
      << "final weights differ from the uninterrupted run's\n"
      << k.output;
  EXPECT_TRUE(qk::read_file(killed + "/iter_0000000012/optim.safetensors") ==
              qk::read_file(ref + "/iter_0000000012/optim.safetensors"));
}

// --exit-signal-handler: SIGTERM finishes the iteration, saves and exits 0;
// the next run resumes there.
TEST(PretrainGptCli, SigtermSavesAndExitsZero) {
  const std::string dir = fresh_dir("sigterm"), log = dir + ".log";
  const Argv args = tiny_model(32) + mock_data() +
                    Argv{"--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "100000", "--lr",
                         "1e-3", "--log-interval", "1", "--eval-iters", "0", "--save", dir, "--load", dir,
                         "--exit-signal-handler", "--save-interval", "1000"};
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string cmd =
        kOneThread + " exec '" + QK_BIN + "' pretrain-gpt" + qk::test::shell_words(args) + " > '" + log + "' 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  bool sent = false;
  for (int i = 0; i < 1200 && !sent; ++i) {  // up to 2 minutes
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (fs::exists(log) && qk::read_file(log).find("iteration        3/") != std::string::npos)
      sent = ::kill(pid, SIGTERM) == 0;
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const std::string text = qk::read_file(log);
  ASSERT_TRUE(sent) << text;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  EXPECT_NE(text.find("exiting program after receiving SIGTERM."), std::string::npos) << text;
  const std::string saved = qk::read_file(dir + "/latest_checkpointed_iteration.txt");
  const int64_t at = std::stoll(saved);
  EXPECT_GE(at, 3);
  // Resume and stop 2 iterations later (--exit-interval).
  auto r = run_qk("pretrain-gpt" + qk::test::shell_words(args + Argv{"--exit-interval", std::to_string(at + 2)}),
                  kOneThread);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("at iteration " + std::to_string(at)), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exiting program at iteration " + std::to_string(at + 2)), std::string::npos) << r.output;
}

// The seed's arrays with the practice sizes (6 layers, hidden 512, 8 heads;
// sequence, batch and iterations shrunk for CI) on one rank: every
// TRAINING_ARGS flag runs (multi-latent attention included) but the virtual
// pipeline stages, which Megatron rejects at pipeline size 1 too. The whole
// arrays with the MOE_ARGS run at PP=2 x EP=2 in pretrain_gpt_moe_test.cc.
TEST(PretrainGptCli, SeedArraysRunOrAreRefusedAsTheStatusTableSays) {
  const qk::test::SeedFlags s = qk::test::load_seed_flags();
  const std::string needs_pipeline = "--num-layers-per-virtual-pipeline-stage";
  Argv supported, all_training = qk::test::expand_array(s.arrays.at("TRAINING_ARGS"));
  for (const auto& line : s.arrays.at("TRAINING_ARGS")) {
    const Argv f = qk::test::expand_line(line);
    if (f[0] != needs_pipeline) supported = supported + f;
  }
  const Argv rest = qk::test::expand_array(s.arrays.at("REGULARIZATION_ARGS")) +
                    qk::test::expand_array(s.arrays.at("LEARNING_RATE_ARGS")) +
                    qk::test::expand_array(s.arrays.at("MODEL_PARALLEL_ARGS")) +
                    qk::test::expand_array(s.arrays.at("MIXED_PRECISION_ARGS"));
  // Practice heads, CI-sized sequence, batch, steps and vocabulary (argparse keeps the last value).
  const Argv shrink = {"--num-attention-heads", "8", "--seq-length", "64", "--max-position-embeddings", "64",
                       "--global-batch-size", "4", "--train-iters", "2", "--lr-warmup-iters", "1", "--lr", "3e-4",
                       "--vocab-size", "4096", "--eval-iters", "1", "--eval-interval", "2", "--log-interval", "1"};
  const Argv model = qk::test::expand_array(s.arrays.at("MODEL_ARGS"));

  auto refused = run_qk("pretrain-gpt" + qk::test::shell_words(model + all_training + rest + mock_data() + shrink));
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_NE(refused.output.find("needs --pipeline-model-parallel-size > 1 (got 1)"), std::string::npos)
      << refused.output;
  EXPECT_EQ(refused.output.find("need features this build does not have yet"), std::string::npos) << refused.output;

  const std::string dir = fresh_dir("seed");
  auto ok = run_qk("pretrain-gpt" + qk::test::shell_words(model + supported + rest + mock_data() + shrink +
                                         Argv{"--save", dir, "--save-interval", "2"}),
                   kOneThread);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  // One info line per no-op flag, and Megatron's own rule for --sequence-parallel at tensor size 1.
  for (const char* note : {"--use-mcore-models: no effect here", "--no-rope-fusion: no effect here",
                           "--distributed-backend nccl: no effect here", "--wait-after-ckpt 0: no effect here",
                           "--sequence-parallel: turned off because --tensor-model-parallel-size is 1"})
    EXPECT_NE(ok.output.find(note), std::string::npos) << note << "\n" << ok.output;
  EXPECT_NE(ok.output.find("iteration        2/       2 |"), std::string::npos) << ok.output;
  EXPECT_TRUE(std::regex_search(ok.output, std::regex("\n  bf16 \\.+ True\n"))) << ok.output;
  EXPECT_TRUE(std::regex_search(ok.output, std::regex("\n  multi_latent_attention \\.+ True\n"))) << ok.output;
  EXPECT_NE(ok.output.find("number of parameters on (tensor, pipeline) model parallel rank (0, 0): "),
            std::string::npos);
  // --use-distributed-optimizer (one rank: the shard is everything) and Megatron's memory line.
  EXPECT_NE(ok.output.find("Theoretical memory footprints: weight and optimizer="), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("the last two sharded over 1 data-parallel ranks"), std::string::npos) << ok.output;
}

TEST(PretrainGptCli, BadFlagsValuesAndFilesAreErrorsNamingThem) {
  const Argv base = tiny_model(32) + Argv{"--micro-batch-size", "2", "--train-iters", "2", "--lr", "1e-3"};
  auto r = run_qk("pretrain-gpt" + qk::test::shell_words(base + mock_data() + Argv{"--num-layer", "3"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--num-layer"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--num-layers"), std::string::npos) << r.output;  // the closest known flag

  r = run_qk("pretrain-gpt" + qk::test::shell_words(base + mock_data() + Argv{"--lr", "fast"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--lr"), std::string::npos) << r.output;

  r = run_qk("pretrain-gpt" + qk::test::shell_words(base + mock_data() + Argv{"--global-batch-size", "3"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--global-batch-size"), std::string::npos) << r.output;

  r = run_qk("pretrain-gpt" + qk::test::shell_words(base + Argv{"--mock-data"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--tokenizer-type"), std::string::npos) << r.output;

  const std::string dir = fresh_dir("bad_files");
  r = run_qk("pretrain-gpt" + qk::test::shell_words(base + Argv{"--tokenizer-type", "NullTokenizer", "--vocab-size",
                                                                "100", "--data-path", dir + "/missing_text_document"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(dir + "/missing_text_document"), std::string::npos) << r.output;

  // A corrupt .idx: the docs' own with its header damaged.
  const std::string prefix = docs_data()[5];
  fs::copy_file(prefix + ".bin", dir + "/bad_text_document.bin");
  std::string idx = qk::read_file(prefix + ".idx");
  idx[3] = 'X';
  qk::atomic_write_file(dir + "/bad_text_document.idx", idx);
  r = run_qk("pretrain-gpt" + qk::test::shell_words(base + Argv{"--tokenizer-type", "NullTokenizer", "--vocab-size",
                                                                "512", "--data-path", dir + "/bad_text_document"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(dir + "/bad_text_document.idx"), std::string::npos) << r.output;

  // A truncated .bin: the .idx points past its end.
  fs::copy_file(prefix + ".idx", dir + "/short_text_document.idx");
  qk::atomic_write_file(dir + "/short_text_document.bin", qk::read_file(prefix + ".bin").substr(0, 100));
  r = run_qk("pretrain-gpt" + qk::test::shell_words(base + Argv{"--tokenizer-type", "NullTokenizer", "--vocab-size",
                                                                "512", "--data-path", dir + "/short_text_document"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(dir + "/short_text_document.bin"), std::string::npos) << r.output;

  // --device (qk's flag): a device this machine lacks, or none at all, stops
  // the run before anything is written; so does a value that names none.
  const std::string out = fresh_dir("bad_device");
  r = run_qk("pretrain-gpt" + qk::test::shell_words(base + mock_data() +
                                                    Argv{"--device", "cuda:7", "--save", out, "--save-interval", "1"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--device cuda:7"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out + "/metrics.jsonl")) << r.output;
  r = run_qk("pretrain-gpt" + qk::test::shell_words(base + mock_data() + Argv{"--device=tpu"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("unknown device 'tpu'"), std::string::npos) << r.output;
  r = run_qk("pretrain-gpt" + qk::test::shell_words(base + mock_data() + Argv{"--device"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--device needs a value"), std::string::npos) << r.output;

  r = run_qk("pretrain-gpt --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("--num-layers"), std::string::npos);
  EXPECT_NE(r.output.find("--use-flash-attn"), std::string::npos);
  EXPECT_NE(r.output.find("--device DEVICE"), std::string::npos);
}

}  // namespace
