// The Trainer's exits in a child process (qk_train_worker): exit_interval
// and SIGTERM (--exit-signal-handler) finish the iteration, save, exit 0,
// and a resumed run ends with the weights of an uninterrupted one, bit for
// bit; the metrics file holds each iteration once.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "common/scratch_dir.h"
#include "common/run_command.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/train/metrics_log.h"

namespace {

namespace fs = std::filesystem;

// build/test_tmp/train_exit/<pid>, removed at exit when every test passed.
const qk::test::ScratchRoot kScratch("train_exit");
const fs::path& kRoot = kScratch.root();

std::string fresh_dir(const std::string& name) {
  const fs::path p = kRoot / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

qk::test::RunResult worker(const std::string& args) {
  return qk::test::run_command(std::string("'") + QK_TRAIN_WORKER + "' " + args);
}

// The uninterrupted run's final weights.
const std::string& reference_weights() {
  static const std::string bytes = [] {
    const std::string dir = fresh_dir("reference");
    const auto r = worker("--save " + dir + " --iters 12 --weights-out " + dir + "/final.safetensors");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("exit_reason finished iteration 12"), std::string::npos) << r.output;
    return qk::read_file(dir + "/final.safetensors");
  }();
  return bytes;
}

// Records in a metrics file another process is appending to (0 while a
// line is half written).
size_t records(const std::string& path) {
  try {
    return fs::exists(path) ? qk::train::MetricsLog::read(path).size() : 0;
  } catch (const qk::Error&) {
    return 0;
  }
}

// Starts the worker with its output in `log`.
pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::FILE* f = std::fopen(log.c_str(), "w");
    if (f) ::dup2(::fileno(f), 1), ::dup2(::fileno(f), 2);
    std::vector<char*> argv{const_cast<char*>(QK_TRAIN_WORKER)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(QK_TRAIN_WORKER, argv.data());
    ::_exit(127);
  }
  return pid;
}

int stopped_at(const std::string& output, const std::string& reason) {
  std::smatch m;
  const std::regex re("exit_reason " + reason + " iteration (\\d+)");
  return std::regex_search(output, m, re) ? std::stoi(m[1]) : -1;
}

TEST(TrainerExit, ExitIntervalSavesAndTheResumedRunIsBitIdentical) {
  const std::string& ref = reference_weights();
  ASSERT_FALSE(ref.empty());
  const std::string dir = fresh_dir("exit_interval");
  const std::string common =
      "--save " + dir + " --load " + dir + " --iters 12 --weights-out " + dir + "/final.safetensors";
  const auto first = worker(common + " --exit-interval 5");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(stopped_at(first.output, "exit_interval"), 5) << first.output;
  EXPECT_TRUE(fs::exists(dir + "/iter_0000000005/model.safetensors")) << first.output;
  EXPECT_EQ(qk::read_file(dir + "/latest_checkpointed_iteration.txt"), "5\n");
  const auto rest = worker(common);
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_NE(rest.output.find("at iteration 5"), std::string::npos) << rest.output;
  EXPECT_EQ(stopped_at(rest.output, "finished"), 12) << rest.output;
  EXPECT_TRUE(qk::read_file(dir + "/final.safetensors") == ref) << "resumed weights differ\n" << rest.output;
  // Each iteration logged once, in order, across both runs; evaluations at 4, 8, 12.
  int expect = 1, valid = 0;
  for (const auto& rec : qk::train::MetricsLog::read(dir + "/metrics.jsonl")) {
    if (rec.kind == "valid") {
      ++valid;
      continue;
    }
    EXPECT_EQ(rec.iteration, expect++);
    EXPECT_EQ(rec.values.at("consumed_samples"), 8.0 * rec.iteration);
  }
  EXPECT_EQ(expect, 13);
  EXPECT_EQ(valid, 3);
}

// SIGTERM from outside while the run is in flight.
TEST(TrainerExit, SigtermFinishesTheIterationSavesAndExitsZero) {
  const std::string& ref = reference_weights();
  ASSERT_FALSE(ref.empty());
  const std::string dir = fresh_dir("sigterm");
  const std::string log = dir + "/first.log";
  const std::string common =
      "--save " + dir + " --load " + dir + " --iters 12 --weights-out " + dir + "/final.safetensors";
  const pid_t pid = spawn({"--save", dir, "--load", dir, "--iters", "12", "--exit-signal-handler", "--sleep-ms", "60"},
                          log);
  ASSERT_GE(pid, 0);
  // Signal once three iterations are logged, wherever the worker then is.
  bool sent = false;
  for (int i = 0; i < 600 && !sent; ++i) {  // up to a minute
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (records(dir + "/metrics.jsonl") >= 3) sent = ::kill(pid, SIGTERM) == 0;
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const std::string first = qk::read_file(log);
  ASSERT_TRUE(sent) << "the worker never got going\n" << first;
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0) << "\n"
                                 << first;
  ASSERT_EQ(WEXITSTATUS(status), 0) << first;
  EXPECT_GE(stopped_at(first, "signal"), 3) << first;
  const auto saved = qk::train::MetricsLog::read(dir + "/metrics.jsonl");
  int last = 0;
  for (const auto& r : saved)
    if (r.kind == "train") last = static_cast<int>(r.iteration);
  ASSERT_GE(last, 3);
  ASSERT_LT(last, 12) << "the signal came after the run had finished";
  EXPECT_TRUE(fs::exists(dir + "/iter_" + std::string(10 - std::to_string(last).size(), '0') + std::to_string(last)))
      << "no checkpoint at the iteration it stopped (" << last << ")";
  const auto rest = worker(common);
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_NE(rest.output.find("at iteration " + std::to_string(last)), std::string::npos) << rest.output;
  EXPECT_EQ(stopped_at(rest.output, "finished"), 12) << rest.output;
  EXPECT_TRUE(qk::read_file(dir + "/final.safetensors") == ref) << "resumed weights differ\n" << rest.output;
}

// Without the handler SIGTERM ends the process as usual (no checkpoint).
TEST(TrainerExit, WithoutTheHandlerSigtermKills) {
  const std::string dir = fresh_dir("no_handler");
  const pid_t pid = spawn({"--save", dir, "--iters", "12", "--sleep-ms", "60"}, dir + "/run.log");
  ASSERT_GE(pid, 0);
  for (int i = 0; i < 600 && records(dir + "/metrics.jsonl") == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
  EXPECT_FALSE(fs::exists(dir + "/iter_0000000012"));
}

}  // namespace
