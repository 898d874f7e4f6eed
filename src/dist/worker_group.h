// The workers one `qk run` agent starts on its node: forked into their own
// process groups (so a stop reaches their children too) with
// PR_SET_PDEATHSIG (so they die with the agent even if it is SIGKILLed),
// their stdout and stderr read through pipes and written out one whole line
// at a time behind "[rank3]: ", optionally teed to DIR/rank3.log.
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace qk::dist {

struct WorkerSpec {
  int rank = 0;        // global rank (for the prefix and messages)
  int local_rank = 0;
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;  // added to (or replacing) ours
};

struct WorkerExit {
  int rank = -1;
  int local_rank = -1;
  pid_t pid = 0;
  int code = 0;    // exit status, or 0 when killed
  int signal = 0;  // the signal that killed it, or 0
  std::string describe() const;  // "exited with code 3" / "was killed by signal 9 (SIGKILL)"
};

class WorkerGroup {
 public:
  // tee_dir: "" for none. last_lines: kept per worker for failure reports.
  explicit WorkerGroup(std::string tee_dir = "", size_t last_lines = 10);
  ~WorkerGroup();  // kills whatever still runs (SIGKILL), so nothing is orphaned
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  void start(const std::vector<WorkerSpec>& specs, int attempt);

  // Forwards output and reaps exited workers for up to timeout_ms (returns
  // early when extra_fd is readable or a worker exits).
  void pump(int timeout_ms, int extra_fd = -1);
  // The first worker that failed (non-zero code or a signal) since start, if any.
  const WorkerExit* first_failure() const { return failed_ ? &first_failure_ : nullptr; }
  bool all_exited() const;
  bool all_succeeded() const;
  // SIGTERM to every worker's process group, SIGKILL after grace_s; reaps all
  // and forwards the rest of their output.
  void stop(double grace_s);
  // The last lines a worker printed (stdout and stderr interleaved).
  std::vector<std::string> last_lines(int local_rank) const;
  std::vector<pid_t> pids() const;

 private:
  struct Stream {
    int fd = -1;
    std::string partial;
  };
  struct Worker {
    WorkerSpec spec;
    pid_t pid = 0;
    bool exited = false;
    WorkerExit exit;
    Stream out, err;
    std::deque<std::string> tail;
    std::FILE* tee = nullptr;
  };
  void read_stream(Worker& w, Stream& s, bool is_err);
  void emit(Worker& w, const std::string& line, bool is_err);
  void reap(bool block);
  void close_streams(Worker& w);

  std::string tee_dir_;
  size_t keep_lines_;
  std::vector<Worker> workers_;
  bool failed_ = false;
  WorkerExit first_failure_;
  bool stopping_ = false;
};

}  // namespace qk::dist
