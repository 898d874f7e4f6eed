// `qk run`: the environment workers see, per-rank prefixes, restarts,
// giving up, signals, and two agents forming one job.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli/run_qk.h"
#include "common/free_port.h"

namespace {
using qk::test::run_qk;
namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("qk_run_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(Run, WorkersSeeTheirEnvironmentBehindRankPrefixes) {
  auto r = run_qk("run --nproc-per-node 2 -- sh -c 'echo R=$RANK L=$LOCAL_RANK W=$WORLD_SIZE "
                  "LW=$LOCAL_WORLD_SIZE A=$MASTER_ADDR C=$QK_RESTART_COUNT T=${#QK_STORE_TOKEN} "
                  "P=${MASTER_PORT:+set}; echo to-stderr >&2'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank0]: R=0 L=0 W=2 LW=2 A=127.0.0.1 C=0 T=32 P=set"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank1]: R=1 L=1 W=2 LW=2 A=127.0.0.1 C=0 T=32 P=set"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank1]: to-stderr"), std::string::npos) << r.output;
}

TEST(Run, LinesAreNeverInterleaved) {
  // Each worker writes 200 long lines as fast as it can.
  auto r = run_qk("run --nproc-per-node 3 -- sh -c 'i=0; while [ $i -lt 200 ]; do "
                  "echo \"$RANK:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:$RANK\"; "
                  "i=$((i+1)); done'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream in(r.output);
  std::string line;
  int counted = 0;
  while (std::getline(in, line)) {
    if (line.rfind("[rank", 0) != 0) continue;
    char rank = line[5];
    std::string want = std::string("[rank") + rank + "]: " + rank + ":" + std::string(71, 'a') + ":" + rank;
    EXPECT_EQ(line, want);
    ++counted;
  }
  EXPECT_EQ(counted, 600);
}

TEST(Run, AWorkerThatFailsOnceIsRestartedAndTheJobCompletes) {
  auto dir = temp_dir("tee");
  auto r = run_qk("run --nproc-per-node 2 --max-restarts 2 --grace 2 --tee " + dir.string() +
                  " -- sh -c 'if [ $QK_RESTART_COUNT = 0 ] && [ $RANK = 1 ]; then echo failing; exit 3; fi; "
                  "if [ $QK_RESTART_COUNT = 0 ]; then sleep 30; fi; echo done restart=$QK_RESTART_COUNT'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 (local rank 1 on node 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exited with code 3; restarting all workers (restart 1 of 2)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[rank0]: done restart=1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank1]: done restart=1"), std::string::npos) << r.output;
  // --tee kept each rank's lines of both attempts.
  std::string log1 = read_file(dir / "rank1.log");
  EXPECT_NE(log1.find("failing"), std::string::npos) << log1;
  EXPECT_NE(log1.find("done restart=1"), std::string::npos) << log1;
  fs::remove_all(dir);
}

TEST(Run, AWorkerThatAlwaysFailsGivesUpNamingRankCodeAndLastLines) {
  auto r = run_qk("run --nproc-per-node 2 --max-restarts 2 --grace 1 -- sh -c "
                  "'if [ $RANK = 1 ]; then echo last words $QK_RESTART_COUNT; exit 7; fi; sleep 30'");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("restart 2 of 2"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("restart 3 of"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("qk run: error: rank 1 (local rank 1 on node 0, pid "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exited with code 7"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("last 1 lines of rank 1:\n  [rank1]: last words 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gave up after 2 restarts"), std::string::npos) << r.output;
}

TEST(Run, AKilledWorkerIsReportedWithItsSignal) {
  auto r = run_qk("run --nproc-per-node 1 -- sh -c 'kill -9 $$'");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("rank 0 (local rank 0 on node 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("was killed by signal 9 (SIGKILL)"), std::string::npos) << r.output;
}

TEST(Run, BadUsageIsAClearError) {
  auto r = run_qk("run --nproc-per-node 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("no command given"), std::string::npos) << r.output;
  r = run_qk("run --nnodes 2 --node-rank 1 -- true", "QK_STORE_TOKEN=");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("QK_STORE_TOKEN"), std::string::npos) << r.output;
  for (const char* bad : {"3:2", "0:2", "a:2", "2:"}) {
    r = run_qk(std::string("run --nnodes ") + bad + " -- true");
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_NE(r.output.find("--nnodes"), std::string::npos) << bad << "\n" << r.output;
  }
  r = run_qk("run --heartbeat-timeout 1 -- true");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--heartbeat-timeout: expected >= 2 seconds"), std::string::npos) << r.output;
  r = run_qk("run --nproc-per-node 1 -- /nonexistent/program");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("cannot execute '/nonexistent/program'"), std::string::npos) << r.output;
}

bool alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  // A zombie waiting for its reaper is gone for our purposes.
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  std::getline(st, s);
  auto close = s.rfind(')');
  return close == std::string::npos || s.size() < close + 3 || s[close + 2] != 'Z';
}

// Starts `qk run` with workers that record their pid and their child's, sends
// `sig` to the launcher, and checks that no recorded process survives.
void signal_leaves_nothing_behind(int sig) {
  auto dir = temp_dir("sig" + std::to_string(sig));
  std::string script = "echo $$ > " + dir.string() + "/w$RANK; sleep 60 & echo $! > " + dir.string() +
                       "/c$RANK; wait";
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::string log = (dir / "out.txt").string();
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    (void)f;
    ::dup2(1, 2);
    ::execl(QK_BIN, QK_BIN, "run", "--nproc-per-node", "3", "--grace", "2", "--", "sh", "-c", script.c_str(),
            (char*)nullptr);
    ::_exit(127);
  }
  // Wait until every worker and child wrote its pid.
  std::vector<pid_t> pids;
  for (int tries = 0; tries < 500 && pids.size() < 6; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pids.clear();
    for (int r = 0; r < 3; ++r)
      for (const char* k : {"w", "c"}) {
        std::string s = read_file(dir / (k + std::to_string(r)));
        if (!s.empty() && s.back() == '\n') pids.push_back(std::stoi(s));
      }
  }
  ASSERT_EQ(pids.size(), 6u) << read_file(dir / "out.txt");
  for (pid_t p : pids) EXPECT_TRUE(alive(p)) << p;
  ::kill(pid, sig);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st)) << st;
  EXPECT_EQ(WEXITSTATUS(st), 128 + sig) << read_file(dir / "out.txt");
  // Orphans would be reparented and linger; give init a moment to reap zombies.
  for (pid_t p : pids) {
    for (int tries = 0; tries < 100 && alive(p); ++tries) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(alive(p)) << "pid " << p << " survived the launcher";
    if (alive(p)) ::kill(p, SIGKILL);
  }
  EXPECT_NE(read_file(dir / "out.txt").find("stopping 3 workers"), std::string::npos) << read_file(dir / "out.txt");
  fs::remove_all(dir);
}

TEST(Run, SigintStopsEveryWorkerAndItsChildren) { signal_leaves_nothing_behind(SIGINT); }
TEST(Run, SigtermStopsEveryWorkerAndItsChildren) { signal_leaves_nothing_behind(SIGTERM); }

using qk::test::free_port;

TEST(Run, TwoNodesOnOneMachineFormOneJob) {
  std::string port = std::to_string(free_port());
  std::string common = "run --nnodes 2 --nproc-per-node 2 --master-addr 127.0.0.1 --master-port " + port +
                       " --rdzv-timeout 20 ";
  std::string cmd = " -- sh -c 'echo rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE'";
  qk::test::RunResult node1;
  std::thread t([&] { node1 = run_qk(common + "--node-rank 1" + cmd, "QK_STORE_TOKEN=sharedsecret"); });
  auto node0 = run_qk(common + "--node-rank 0" + cmd, "QK_STORE_TOKEN=sharedsecret");
  t.join();
  EXPECT_EQ(node0.exit_code, 0) << node0.output;
  EXPECT_EQ(node1.exit_code, 0) << node1.output;
  EXPECT_NE(node0.output.find("[rank1]: rank=1 local=1 world=4"), std::string::npos) << node0.output;
  EXPECT_NE(node1.output.find("[rank2]: rank=2 local=0 world=4"), std::string::npos) << node1.output;
  EXPECT_NE(node1.output.find("[rank3]: rank=3 local=1 world=4"), std::string::npos) << node1.output;
}

TEST(Run, AMissingNodeTimesOutNamingIt) {
  std::string port = std::to_string(free_port());
  auto r = run_qk("run --nnodes 2 --node-rank 0 --master-port " + port + " --rdzv-timeout 1 -- true",
                  "QK_STORE_TOKEN=s");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("node(s) 1 of 2 never joined"), std::string::npos) << r.output;
}

TEST(Run, AFailureOnOneNodeRestartsBoth) {
  std::string port = std::to_string(free_port());
  std::string common = "run --nnodes 2 --nproc-per-node 1 --master-port " + port +
                       " --rdzv-timeout 20 --max-restarts 1 --grace 1 ";
  // Rank 1 (node 1) fails in the first attempt; rank 0 would sleep forever.
  std::string cmd = " -- sh -c 'if [ $QK_RESTART_COUNT = 0 ]; then if [ $RANK = 1 ]; then exit 5; fi; "
                    "sleep 30; fi; echo ok restart=$QK_RESTART_COUNT'";
  qk::test::RunResult node1;
  std::thread t([&] { node1 = run_qk(common + "--node-rank 1" + cmd, "QK_STORE_TOKEN=x"); });
  auto node0 = run_qk(common + "--node-rank 0" + cmd, "QK_STORE_TOKEN=x");
  t.join();
  EXPECT_EQ(node0.exit_code, 0) << node0.output;
  EXPECT_EQ(node1.exit_code, 0) << node1.output;
  EXPECT_NE(node0.output.find("rank 1 (local rank 0 on node 1"), std::string::npos) << node0.output;
  EXPECT_NE(node0.output.find("[rank0]: ok restart=1"), std::string::npos) << node0.output;
  EXPECT_NE(node1.output.find("[rank1]: ok restart=1"), std::string::npos) << node1.output;
}

// Elastic jobs (--nnodes 1:2), two agents of one worker each.
// Node 1's worker fails and its agent gives up (--max-restarts 0): node 0
// goes on alone at once (node 1 said it left), WORLD_SIZE 1.
TEST(Run, AnElasticJobGoesOnWithoutANodeThatGaveUp) {
  std::string port = std::to_string(free_port());
  std::string common = "run --nnodes 1:2 --master-port " + port + " --rdzv-timeout 20 --grace 1 ";
  std::string cmd = " -- sh -c 'echo rank=$RANK world=$WORLD_SIZE attempt=$QK_RESTART_COUNT; "
                    "if [ $RANK = 1 ]; then exit 4; fi; if [ $WORLD_SIZE = 2 ]; then sleep 30; fi'";
  qk::test::RunResult node1;
  std::thread t([&] { node1 = run_qk(common + "--node-rank 1 --max-restarts 0" + cmd, "QK_STORE_TOKEN=e1"); });
  const auto start = std::chrono::steady_clock::now();
  auto node0 = run_qk(common + "--node-rank 0 --max-restarts 1 --heartbeat-timeout 60" + cmd, "QK_STORE_TOKEN=e1");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  t.join();
  EXPECT_EQ(node0.exit_code, 0) << node0.output;
  EXPECT_EQ(node1.exit_code, 1) << node1.output;
  EXPECT_NE(node0.output.find("[rank0]: rank=0 world=2 attempt=0"), std::string::npos) << node0.output;
  EXPECT_NE(node0.output.find("exited with code 4; restarting all workers (restart 1 of 1)"), std::string::npos)
      << node0.output;
  EXPECT_NE(node0.output.find("attempt 1: the nodes changed from 2 to 1 (0): world size 2 -> 1"), std::string::npos)
      << node0.output;
  EXPECT_NE(node0.output.find("[rank0]: rank=0 world=1 attempt=1"), std::string::npos) << node0.output;
  EXPECT_NE(node1.output.find("no restarts allowed"), std::string::npos) << node1.output;
  // Node 1 said it left: node 0 did not wait out node 1's heartbeats (60 s),
  // which is the only other way this attempt could start without it.
  EXPECT_LT(seconds, 40) << node0.output;
}

// Node 1's agent is SIGKILLed (a node that vanishes): node 0 takes it as
// lost after --heartbeat-timeout and goes on alone.
TEST(Run, AnElasticJobGoesOnWhenANodesHeartbeatsStop) {
  std::string port = std::to_string(free_port());
  auto dir = temp_dir("heartbeat");
  std::string common = "run --nnodes 1:2 --master-port " + port + " --rdzv-timeout 20 --grace 1 ";
  pid_t node1 = ::fork();
  ASSERT_GE(node1, 0);
  if (node1 == 0) {
    std::string log = (dir / "node1.txt").string();
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    (void)f;
    ::dup2(1, 2);
    ::setenv("QK_STORE_TOKEN", "e2", 1);
    ::execl(QK_BIN, QK_BIN, "run", "--nnodes", "1:2", "--node-rank", "1", "--master-port", port.c_str(), "--",
            "sh", "-c", ("echo started > " + (dir / "w1").string() + "; exec sleep 60").c_str(), (char*)nullptr);
    ::_exit(127);
  }
  std::thread killer([&] {
    for (int tries = 0; tries < 1000 && read_file(dir / "w1").empty(); ++tries)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ::kill(node1, SIGKILL);  // its worker dies with it (PR_SET_PDEATHSIG)
  });
  auto node0 = run_qk(common + "--node-rank 0 --max-restarts 1 --heartbeat-timeout 3 -- sh -c "
                      "'echo world=$WORLD_SIZE; if [ $WORLD_SIZE = 2 ]; then sleep 60; fi'",
                      "QK_STORE_TOKEN=e2");
  killer.join();
  int st = 0;
  ::waitpid(node1, &st, 0);
  EXPECT_EQ(node0.exit_code, 0) << node0.output;
  EXPECT_NE(node0.output.find("node 1 sent no heartbeat for 3 s (--heartbeat-timeout): taking it as lost"),
            std::string::npos)
      << node0.output;
  EXPECT_NE(node0.output.find("[rank0]: world=1"), std::string::npos) << node0.output;
  fs::remove_all(dir);
}

// Node 0 starts alone (1 of 1..2 after the 1 s last call); node 1 arrives
// later and the job regroups on both, which is no restart.
TEST(Run, AnElasticJobTakesInANodeThatJoinsLater) {
  std::string port = std::to_string(free_port());
  auto dir = temp_dir("grow");
  std::string common = "run --nnodes 1:2 --master-port " + port + " --rdzv-timeout 20 --grace 1 --max-restarts 0 ";
  std::string cmd = " -- sh -c 'echo world=$WORLD_SIZE attempt=$QK_RESTART_COUNT; touch " + (dir / "w").string() +
                    "$RANK$WORLD_SIZE; if [ $WORLD_SIZE = 1 ]; then sleep 60; fi'";
  auto node0_future = std::async(std::launch::async, [&] {
    return run_qk(common + "--node-rank 0 --rdzv-last-call 1" + cmd, "QK_STORE_TOKEN=e3");
  });
  for (int tries = 0; tries < 1000 && !fs::exists(dir / "w01"); ++tries)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(fs::exists(dir / "w01"));
  auto node1 = run_qk(common + "--node-rank 1" + cmd, "QK_STORE_TOKEN=e3");
  auto node0 = node0_future.get();
  EXPECT_EQ(node0.exit_code, 0) << node0.output;
  EXPECT_EQ(node1.exit_code, 0) << node1.output;
  EXPECT_NE(node0.output.find("attempt 0: 1 of 1..2 nodes (0), world size 1"), std::string::npos) << node0.output;
  EXPECT_NE(node0.output.find("a node is waiting to join; regrouping (1 of at most 2 nodes now); restarting all "
                              "workers (not counted against --max-restarts)"),
            std::string::npos)
      << node0.output;
  EXPECT_NE(node0.output.find("[rank0]: world=2 attempt=1"), std::string::npos) << node0.output;
  EXPECT_NE(node1.output.find("[rank1]: world=2 attempt=1"), std::string::npos) << node1.output;
  fs::remove_all(dir);
}

}  // namespace
