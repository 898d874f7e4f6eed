// `qk pretrain-gpt` in an elastic job (`qk run --nnodes 1:2`, two agents of
// one rank each): when node 1 is lost the job goes on on node 0 alone from
// the last checkpoint, the global batch kept by twice the accumulation, the
// data where it stopped: every iteration's loss is the one-rank run's. A
// layout that cannot shrink (TP=2 on one rank) ends the job with the reason
// instead of restarting into it.
//
// Tolerances as in pretrain_gpt_parallel_test.cc (f32, sums in another order).
#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <string>

#include "cli/pretrain_runs.h"
#include "cli/run_qk.h"
#include "common/scratch_dir.h"
#include "common/argv.h"
#include "common/free_port.h"

namespace {

using qk::test::Argv;
using qk::test::operator+;
using qk::test::run_qk;

const qk::test::ScratchRoot kScratch("pretrain_elastic");

// 2 layers, hidden 64, sequence 32, mock data; micro-batch 2, global batch 8:
// 2 micro-batches a step on 2 ranks, 4 on one.
Argv tiny() {
  return {"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
          "--max-position-embeddings", "32", "--position-embedding-type", "rope", "--normalization", "RMSNorm",
          "--swiglu", "--disable-bias-linear", "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size",
          "4095", "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "8", "--lr", "3e-3",
          "--log-interval", "1", "--eval-interval", "100", "--eval-iters", "1", "--attention-dropout", "0",
          "--hidden-dropout", "0", "--save-interval", "3"};
}

struct Nodes {
  qk::test::RunResult node0, node1;
};

// Two agents of one rank each; node 0 may restart `restarts0` times, node 1
// never (so a failure there makes it leave).
Nodes elastic_pair(const Argv& args, const std::string& env, int restarts0) {
  const std::string port = std::to_string(qk::test::free_port());
  const std::string common = "run --nnodes 1:2 --master-port " + port + " --rdzv-timeout 60 --grace 2 ";
  const std::string cmd = " -- '" + std::string(QK_BIN) + "' pretrain-gpt" + qk::test::shell_words(args);
  const std::string e = "QK_STORE_TOKEN=elastic QK_NUM_THREADS=1 " + env;
  auto node1 = std::async(std::launch::async,
                          [&] { return run_qk(common + "--node-rank 1 --max-restarts 0" + cmd, e); });
  Nodes n;
  n.node0 = run_qk(common + "--node-rank 0 --max-restarts " + std::to_string(restarts0) + cmd, e);
  n.node1 = node1.get();
  return n;
}

// Rank 1 (node 1) is SIGKILLed after iteration 5; iteration 3's checkpoint
// resumes on one rank, which runs iterations 4-8 with 4 micro-batches.
TEST(PretrainElastic, ALostNodeLeavesOneRankOnTheOneRankRunsLosses) {
  const std::string ref = kScratch.fresh("ref"), dir = kScratch.fresh("elastic");
  const auto r = qk::test::pretrain_one_rank(tiny() + Argv{"--save", ref});
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const Nodes n = elastic_pair(tiny() + Argv{"--save", dir, "--load", dir}, "QK_FAULT_KILL=step:1:5", 1);
  ASSERT_EQ(n.node0.exit_code, 0) << n.node0.output << n.node1.output;
  EXPECT_EQ(n.node1.exit_code, 1) << n.node1.output;
  const std::string& out = n.node0.output;
  EXPECT_NE(out.find("attempt 1: the nodes changed from 2 to 1 (0): world size 2 -> 1"), std::string::npos) << out;
  EXPECT_NE(out.find("successfully loaded checkpoint from " + dir + "/iter_0000000003"), std::string::npos) << out;
  qk::test::expect_same_losses(ref, dir, 1, 8);
  qk::test::expect_close_tensors(ref + "/iter_0000000008/model.safetensors", dir + "/iter_0000000008/model.safetensors");
  qk::test::expect_close_tensors(ref + "/iter_0000000008/optim.safetensors", dir + "/iter_0000000008/optim.safetensors");
}

// TP=2 over the two nodes: one rank cannot hold it. The rank refuses the
// size (exit 78) and the job ends there, with restarts to spare.
TEST(PretrainElastic, ALayoutThatCannotShrinkEndsTheJobWithTheReason) {
  const std::string dir = kScratch.fresh("tp2");
  const Nodes n = elastic_pair(tiny() + Argv{"--tensor-model-parallel-size", "2", "--save", dir, "--load", dir},
                               "QK_FAULT_KILL=step:1:4", 3);
  EXPECT_EQ(n.node0.exit_code, 1) << n.node0.output;
  const std::string& out = n.node0.output;
  EXPECT_NE(out.find("world size (1) is not divisible by --tensor-model-parallel-size (2)"), std::string::npos)
      << out;
  EXPECT_NE(out.find("exit code 78 means the job's layout does not fit 1 ranks; not restarting"), std::string::npos)
      << out;
  EXPECT_EQ(out.find("restart 2 of 3"), std::string::npos) << out;
}

}  // namespace
