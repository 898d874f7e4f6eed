// Surviving failures: a data-parallel `qk train cifar10`
// under `qk run --max-restarts` whose ranks are killed with SIGKILL (by a
// fault point inside the process, and from outside), whose checkpoint write
// is cut short, or whose newest checkpoint is corrupt, ends with the weights
// of an uninterrupted run, bit for bit.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "qk/base/checkpoint_dir.h"
#include "qk/base/file_io.h"
#include "run_qk.h"
#include "common/scratch_dir.h"

namespace {

namespace fs = std::filesystem;
using qk::test::run_qk;

const qk::test::ScratchRoot kScratch("train_resume");

std::string fresh_dir(const std::string& name) { return kScratch.fresh(name); }

// 512 images, 2 ranks x 16 per step: 16 steps per epoch, 32 in all.
constexpr int kSteps = 32;

std::string data_dir() {
  static const std::string dir = [] {
    const std::string d = fresh_dir("data");
    const auto r = run_qk("data synth-cifar --out " + d + " --num-train 512 --num-test 64 --seed 3");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return d;
  }();
  return dir;
}

std::string train_args(const std::string& out, const std::string& extra = "") {
  return "train cifar10 --data-dir " + data_dir() + " --out " + out +
         " --global-batch-size 32 --epochs 2 --lr 0.002 --threads 1 --num-workers 1 --seed 11"
         " --checkpoint-every 3 --no-progress --resume " + extra;
}

std::string ddp_job(const std::string& out, int max_restarts, const std::string& extra = "") {
  return "run --nproc-per-node 2 --max-restarts " + std::to_string(max_restarts) + " -- " + QK_BIN + " " +
         train_args(out, extra);
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// The uninterrupted run every recovery must reproduce.
const std::string& reference_weights() {
  static const std::string bytes = [] {
    const std::string out = fresh_dir("reference");
    const auto r = run_qk(ddp_job(out, 0));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("resume auto: no checkpoint"), std::string::npos) << r.output;
    return qk::read_file(out + "/checkpoints/latest.safetensors");
  }();
  return bytes;
}

void expect_reference_weights(const std::string& out, const std::string& log) {
  const std::string path = out + "/checkpoints/latest.safetensors";
  ASSERT_TRUE(fs::exists(path)) << log;
  EXPECT_TRUE(qk::read_file(path) == reference_weights())
      << "final weights differ from the uninterrupted run's\n" << log;
}

// Five SIGKILLs of a random rank at random steps (increasing, so each attempt
// gets past its checkpoint to the next kill): qk run restarts the group five
// times, every restart resumes from the newest checkpoint, and the final
// weights equal the uninterrupted run's bit for bit.
TEST(TrainResume, FiveKilledRanksEndBitIdentical) {
  const std::string& ref = reference_weights();
  ASSERT_FALSE(ref.empty());
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::set<int> steps;
  while (steps.size() < 5) steps.insert(1 + static_cast<int>(rng() % (kSteps - 1)));
  std::string plan;
  for (int s : steps) {
    if (!plan.empty()) plan += ',';
    plan += "step:" + std::to_string(rng() % 2);
    plan += ':' + std::to_string(s);
  }
  SCOPED_TRACE("QK_FAULT_KILL=" + plan + " (random seed " + std::to_string(seed) + ")");
  const std::string out = fresh_dir("killed");
  const auto r = run_qk(ddp_job(out, 10), "QK_FAULT_KILL=" + plan);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "restarting all workers"), 5) << r.output;
  EXPECT_EQ(count(r.output, "QK_FAULT_KILL: killing"), 5) << r.output;
  // A kill up to the first checkpoint (step 3) may restart from scratch; every later one resumes.
  const auto resumable = static_cast<int>(std::count_if(steps.begin(), steps.end(), [](int s) { return s > 3; }));
  EXPECT_GE(count(r.output, "resumed from"), resumable) << r.output;
  expect_reference_weights(out, r.output);
}

// Rank 0 dies inside its second checkpoint commit (files written, folder not
// yet renamed): the first checkpoint stays the newest valid one, the
// leftover is cleared, and the restarted job still ends bit-identical.
TEST(TrainResume, KillDuringCheckpointWriteKeepsThePreviousOne) {
  const std::string out = fresh_dir("ckpt_write");
  const auto killed = run_qk(ddp_job(out, 0), "QK_FAULT_KILL=checkpoint:0:2");
  EXPECT_NE(killed.exit_code, 0) << killed.output;
  EXPECT_NE(killed.output.find("killing this process"), std::string::npos) << killed.output;
  const qk::CheckpointDir ckpts(out + "/checkpoints");
  EXPECT_EQ(ckpts.list(), std::vector<std::string>{"step-0000000003"}) << killed.output;
  bool leftover = false;
  for (const auto& e : fs::directory_iterator(out + "/checkpoints"))
    leftover |= e.path().filename().string().starts_with(".tmp-step-0000000006");
  EXPECT_TRUE(leftover) << "the interrupted write should have left its private folder";
  const auto resumed = run_qk(ddp_job(out, 0));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + out + "/checkpoints/step-0000000003"), std::string::npos)
      << resumed.output;
  for (const auto& e : fs::directory_iterator(out + "/checkpoints"))
    EXPECT_NE(e.path().filename().string()[0], '.') << "leftover not cleared: " << e.path();
  expect_reference_weights(out, resumed.output);
}

// The same with --async-save: rank 0 dies while its background writer
// commits the second checkpoint; the first stays the newest valid one and the
// resumed job (saving asynchronously too) ends bit-identical.
TEST(TrainResume, KillDuringAsyncCheckpointWriteKeepsThePreviousOne) {
  const std::string out = fresh_dir("async_ckpt_write");
  const auto killed = run_qk(ddp_job(out, 0, "--async-save"), "QK_FAULT_KILL=checkpoint:0:2");
  EXPECT_NE(killed.exit_code, 0) << killed.output;
  EXPECT_NE(killed.output.find("killing this process"), std::string::npos) << killed.output;
  const qk::CheckpointDir ckpts(out + "/checkpoints");
  EXPECT_EQ(ckpts.list(), std::vector<std::string>{"step-0000000003"}) << killed.output;
  const auto resumed = run_qk(ddp_job(out, 0, "--async-save"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + out + "/checkpoints/step-0000000003"), std::string::npos)
      << resumed.output;
  EXPECT_EQ(ckpts.list().back(), "step-0000000032") << resumed.output;  // the last one, on disk before exit
  expect_reference_weights(out, resumed.output);
}

// A flipped byte in the newest checkpoint: --resume warns, names the file and
// resumes from the one before; the result is still the reference.
TEST(TrainResume, CorruptNewestCheckpointIsSkipped) {
  const std::string out = fresh_dir("corrupt");
  const auto first = run_qk(ddp_job(out, 0), "QK_FAULT_KILL=step:1:20");
  EXPECT_NE(first.exit_code, 0) << first.output;
  const qk::CheckpointDir ckpts(out + "/checkpoints");
  ASSERT_EQ(ckpts.list().back(), "step-0000000018") << first.output;
  const std::string model = out + "/checkpoints/step-0000000018/model.safetensors";
  std::string bytes = qk::read_file(model);
  bytes[bytes.size() / 2] ^= 0x10;
  std::ofstream(model, std::ios::binary | std::ios::trunc) << bytes;
  // qk checkpoint verify finds it (and only it), and says so in its exit status.
  const auto verify = run_qk("checkpoint verify " + out + "/checkpoints");
  EXPECT_EQ(verify.exit_code, 1) << verify.output;
  EXPECT_NE(verify.output.find("/step-0000000018: CORRUPT: "), std::string::npos) << verify.output;
  EXPECT_NE(verify.output.find("model.safetensors fails its checksum"), std::string::npos) << verify.output;
  EXPECT_NE(verify.output.find("/step-0000000016: ok ("), std::string::npos) << verify.output;
  EXPECT_EQ(count(verify.output, ": ok ("), 2) << verify.output;
  const auto resumed = run_qk(ddp_job(out, 0));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("skipping checkpoint step-0000000018"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("model.safetensors fails its checksum"), std::string::npos) << resumed.output;
  // Kept were steps 15, 16 (epoch 1's end) and 18.
  EXPECT_NE(resumed.output.find("checkpoints/step-0000000016: 1 epochs done"),
            std::string::npos)
      << resumed.output;
  expect_reference_weights(out, resumed.output);
  const auto clean = run_qk("checkpoint verify " + out + "/checkpoints");
  EXPECT_EQ(clean.exit_code, 0) << clean.output;
  EXPECT_EQ(clean.output.find("CORRUPT"), std::string::npos) << clean.output;
  EXPECT_EQ(run_qk("checkpoint verify " + out).exit_code, 1);  // the run's folder holds no checkpoints itself
}

// Elastic shrink: a 2-rank job stops at step 20 (its newest checkpoint is
// step 18); one rank takes it over with the same --global-batch-size (32 per
// rank now) and finishes the remaining 14 steps from epoch 2's 3rd batch.
TEST(TrainResume, ATwoRankCheckpointContinuesOnOneRankWithTheGlobalBatch) {
  const std::string out = fresh_dir("shrink");
  const auto first = run_qk(ddp_job(out, 0), "QK_FAULT_KILL=step:1:20");
  EXPECT_NE(first.exit_code, 0) << first.output;
  ASSERT_EQ(qk::CheckpointDir(out + "/checkpoints").list().back(), "step-0000000018") << first.output;
  const auto one = run_qk(train_args(out));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("step-0000000018: 1 epochs done and 2 batches of epoch 2"), std::string::npos)
      << one.output;
  EXPECT_NE(one.output.find("batch 32,"), std::string::npos) << one.output;
  EXPECT_EQ(qk::CheckpointDir(out + "/checkpoints").list().back(), "step-0000000032") << one.output;
}

// The pids of this job's `qk train` workers (found by their unique --out).
std::vector<pid_t> workers_of(const std::string& out) {
  std::vector<pid_t> pids;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    using namespace std::string_literals;
    if (cmd.find("train\0cifar10"s) != std::string::npos && cmd.find(out + '\0') != std::string::npos &&
        cmd.find("run\0--nproc"s) == std::string::npos)  // not qk run itself
      pids.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return pids;
}

// kill -9 from outside, at whatever instruction the worker is at, once a
// checkpoint exists: qk run restarts the group and the result is unchanged.
TEST(TrainResume, ExternalKillMinus9OfARank) {
  const std::string out = fresh_dir("external");
  const std::string log = out + ".log";
  const pid_t job = ::fork();
  ASSERT_GE(job, 0);
  if (job == 0) {
    const std::string cmd = std::string("'") + QK_BIN + "' " + ddp_job(out, 3) + " > '" + log + "' 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const qk::CheckpointDir ckpts(out + "/checkpoints");
  bool killed = false;
  for (int i = 0; i < 1200 && !killed; ++i) {  // up to 2 minutes
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (ckpts.list().empty()) continue;
    const auto pids = workers_of(out);
    if (pids.size() != 2) continue;
    std::mt19937 rng(std::random_device{}());
    killed = ::kill(pids[rng() % 2], SIGKILL) == 0;
  }
  int status = 0;
  ASSERT_EQ(::waitpid(job, &status, 0), job);
  const std::string text = fs::exists(log) ? qk::read_file(log) : "";
  ASSERT_TRUE(killed) << "no worker to kill\n" << text;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  EXPECT_NE(text.find("restarting all workers (restart 1 of 3)"), std::string::npos) << text;
  EXPECT_NE(text.find("resumed from"), std::string::npos) << text;
  expect_reference_weights(out, text);
}

// Ranks that find different checkpoints (as on nodes without a shared
// filesystem) are stopped with the reason, not left to train apart.
TEST(TrainResume, RanksAtDifferentStepsAreRefused) {
  ASSERT_FALSE(reference_weights().empty());
  const std::string out = fresh_dir("split");
  fs::create_directories(out + "/r0");
  fs::copy(kScratch.root() / "reference" / "checkpoints", out + "/r0/checkpoints", fs::copy_options::recursive);
  // $RANK is left to each worker's shell: rank 0 reads r0/, rank 1 r1/.
  const std::string train = std::string("\"") + QK_BIN + "\" " + train_args(out + "/r$RANK");
  const auto r = run_qk("run --nproc-per-node 2 -- sh -c 'exec " + train + "'");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("The ranks resumed at different steps (0 to 32"), std::string::npos) << r.output;
}

TEST(TrainResume, GlobalBatchMustDivideByRanks) {
  const std::string out = fresh_dir("global_batch");
  const auto r = run_qk("run --nproc-per-node 2 -- " + std::string(QK_BIN) + " train cifar10 --data-dir " +
                        data_dir() + " --out " + out + " --global-batch-size 33 --epochs 1 --threads 1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--global-batch-size 33 is not divisible by the 2 ranks"), std::string::npos) << r.output;
}

}  // namespace
