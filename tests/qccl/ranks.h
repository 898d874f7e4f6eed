// Runs N ranks as forked processes, each initialising from the same unique
// ids, with a watchdog so a bug can never hang the test (gloo's
// base_test.h spawns threads; qccl's ranks are processes because each owns
// its shared memory and sockets, as in production).
//
//   auto r = qccl_test::run_ranks(4, [](const qccl_test::Rank& me) {
//     qcclComm_t comm = me.init();            // config: transport/algo/timeout
//     REQUIRE(..., "rank ", me.rank, " got ", x);
//   });
//   EXPECT_TRUE(r.ok()) << r.summary();
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "qccl.h"
#include "qk/base/log.h"

namespace qccl_test {

template <typename... A>
std::string cat(const A&... a) {
  std::ostringstream os;
  (os << ... << a);
  return os.str();
}

// Seconds since t0 (the fault tests bound how long an error may take).
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// This rank dies by SIGKILL after `ms`, wherever it is then (mid-collective).
inline void sigkill_self_after(int ms) {
  std::thread([ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    ::raise(SIGKILL);
  }).detach();
}

// Fails the rank (the parent reports the message).
#define REQUIRE(cond, ...)                                                                   \
  do {                                                                                       \
    if (!(cond))                                                                             \
      throw std::runtime_error(::qccl_test::cat(__FILE__, ":", __LINE__, ": " #cond ": ",   \
                                                ##__VA_ARGS__));                             \
  } while (0)
#define REQUIRE_OK(call)                                                                     \
  do {                                                                                       \
    qcclResult_t rc_ = (call);                                                               \
    REQUIRE(rc_ == qcclSuccess, #call " returned ", qcclGetErrorString(rc_), ": ",           \
            qcclGetLastError(nullptr));                                                      \
  } while (0)

struct Options {
  // nullptr: QCCL_TRANSPORT / auto; "shm" uses single copy (CMA) from 4 KiB
  // so the matrix exercises it; "shm_nocma" streams everything through the rings.
  const char* transport = nullptr;
  const char* algo = nullptr;
  double timeout_s = 30;
  int num_ids = 1;
  double watchdog_s = 60;
};

struct Rank {
  int rank;
  int nranks;
  std::vector<qcclUniqueId> ids;
  Options opt;
  qcclComm_t init(int id_index = 0, const char* algo = nullptr) const {
    qcclConfig_t cfg = QCCL_CONFIG_INITIALIZER;
    cfg.timeoutS = opt.timeout_s;
    cfg.transport = opt.transport;
    cfg.algo = algo ? algo : opt.algo;
    qcclComm_t c = nullptr;
    REQUIRE_OK(qcclCommInitRankConfig(&c, nranks, ids[id_index], rank, &cfg));
    return c;
  }
};

struct Result {
  std::vector<int> status;  // exit code, or 128 + signal
  bool timed_out = false;
  bool ok() const {
    if (timed_out) return false;
    for (int s : status)
      if (s != 0) return false;
    return true;
  }
  std::string summary() const {
    std::string s = timed_out ? "watchdog fired; " : "";
    for (size_t i = 0; i < status.size(); ++i) s += cat("rank ", i, " status ", status[i], "; ");
    return s;
  }
};

inline Result run_ranks(int n, const std::function<void(const Rank&)>& fn, Options opt = {}) {
  std::vector<qcclUniqueId> ids(opt.num_ids);
  for (auto& id : ids)
    if (qcclGetUniqueId(&id) != qcclSuccess)
      throw std::runtime_error(cat("qcclGetUniqueId: ", qcclGetLastError(nullptr)));
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      qk::logging::set_prefix(cat("[rank ", r, "] "));
      if (opt.transport && std::string(opt.transport) == "shm_nocma") {
        ::setenv("QCCL_CMA", "0", 1);
        opt.transport = "shm";
      } else if (opt.transport && std::string(opt.transport) == "shm") {
        ::setenv("QCCL_CMA_MIN_BYTES", "4096", 1);
      }
      int code = 0;
      try {
        fn(Rank{r, n, ids, opt});
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[rank %d] FAILED: %s\n", r, e.what());
        code = 1;
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  Result res;
  res.status.assign(n, -1);
  auto start = std::chrono::steady_clock::now();
  int left = n;
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      if (res.status[r] != -1) continue;
      int st = 0;
      if (::waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        res.status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(opt.watchdog_s)) {
      res.timed_out = true;
      for (int r = 0; r < n; ++r)
        if (res.status[r] == -1) ::kill(pids[r], SIGKILL);
      for (int r = 0; r < n; ++r)
        if (res.status[r] == -1) {
          int st = 0;
          ::waitpid(pids[r], &st, 0);
          res.status[r] = 128 + SIGKILL;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return res;
}

}  // namespace qccl_test
