#include "worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "qk/base/error.h"

extern char** environ;

namespace qk::dist {
namespace {

void write_all(int fd, const std::string& s) {
  const char* p = s.data();
  size_t n = s.size();
  while (n > 0) {
    ssize_t k = ::write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;  // our own stdout is gone; nothing better to do
    p += k;
    n -= static_cast<size_t>(k);
  }
}

// The environment for a worker: ours with `extra` added or replaced, as
// "NAME=value" strings prepared before fork (the child must not allocate).
std::vector<std::string> make_env(const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::string> out;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    std::string name = kv.substr(0, eq);
    bool replaced = false;
    for (const auto& x : extra)
      if (x.first == name) replaced = true;
    if (!replaced) out.push_back(std::move(kv));
  }
  for (const auto& x : extra) out.push_back(x.first + "=" + x.second);
  return out;
}

}  // namespace

std::string WorkerExit::describe() const {
  if (signal) {
    const char* name = ::sigabbrev_np(signal);
    return "was killed by signal " + std::to_string(signal) + (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "exited with code " + std::to_string(code);
}

WorkerGroup::WorkerGroup(std::string tee_dir, size_t last_lines)
    : tee_dir_(std::move(tee_dir)), keep_lines_(last_lines) {}

WorkerGroup::~WorkerGroup() {
  for (auto& w : workers_)
    if (w.pid > 0 && !w.exited) ::kill(-w.pid, SIGKILL);
  reap(true);
  for (auto& w : workers_) close_streams(w);
}

void WorkerGroup::close_streams(Worker& w) {
  for (Stream* s : {&w.out, &w.err})
    if (s->fd >= 0) {
      ::close(s->fd);
      s->fd = -1;
    }
  if (w.tee) {
    std::fclose(w.tee);
    w.tee = nullptr;
  }
}

void WorkerGroup::start(const std::vector<WorkerSpec>& specs, int attempt) {
  QK_CHECK(workers_.empty(), "WorkerGroup::start called twice");
  if (!tee_dir_.empty()) ::mkdir(tee_dir_.c_str(), 0755);
  workers_.resize(specs.size());
  pid_t parent = ::getpid();
  for (size_t i = 0; i < specs.size(); ++i) {
    Worker& w = workers_[i];
    w.spec = specs[i];
    QK_CHECK(!w.spec.argv.empty(), "qk run: no command to run");
    if (!tee_dir_.empty()) {
      std::string path = tee_dir_ + "/rank" + std::to_string(w.spec.rank) + ".log";
      w.tee = std::fopen(path.c_str(), "a");
      QK_CHECK_AS(IoError, w.tee, "--tee: cannot open ", path, ": ", detail::errno_string(errno));
      std::fprintf(w.tee, "==== qk run: attempt %d, rank %d ====\n", attempt, w.spec.rank);
      std::fflush(w.tee);
    }
    int out[2], err[2];
    QK_SYSCALL(::pipe2(out, O_CLOEXEC));
    QK_SYSCALL(::pipe2(err, O_CLOEXEC));
    std::vector<std::string> env = make_env(w.spec.env);
    std::vector<char*> envp, argv;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    for (auto& a : w.spec.argv) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::string exec_fail = "qk run: cannot execute '" + w.spec.argv[0] + "': ";
    std::fflush(nullptr);
    pid_t pid = ::fork();
    QK_CHECK_AS(IoError, pid >= 0, "qk run: fork failed: ", detail::errno_string(errno));
    if (pid == 0) {
      // Child: only async-signal-safe calls until exec.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(128 + SIGKILL);  // the agent died before prctl
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD}) ::sigaction(sig, &dfl, nullptr);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::execvpe(argv[0], argv.data(), envp.data());
      int e = errno;
      ssize_t r1 = ::write(2, exec_fail.data(), exec_fail.size());
      const char* msg = ::strerror(e);
      ssize_t r2 = ::write(2, msg, std::strlen(msg));
      ssize_t r3 = ::write(2, "\n", 1);
      (void)r1, (void)r2, (void)r3;
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here, so a stop right after fork reaches the group
    ::close(out[1]);
    ::close(err[1]);
    w.pid = pid;
    w.out.fd = out[0];
    w.err.fd = err[0];
    ::fcntl(out[0], F_SETFL, O_NONBLOCK);
    ::fcntl(err[0], F_SETFL, O_NONBLOCK);
  }
}

void WorkerGroup::emit(Worker& w, const std::string& line, bool is_err) {
  write_all(is_err ? 2 : 1, "[rank" + std::to_string(w.spec.rank) + "]: " + line + "\n");
  if (w.tee) {
    std::fputs(line.c_str(), w.tee);
    std::fputc('\n', w.tee);
    std::fflush(w.tee);
  }
  w.tail.push_back(line);
  if (w.tail.size() > keep_lines_) w.tail.pop_front();
}

void WorkerGroup::read_stream(Worker& w, Stream& s, bool is_err) {
  char buf[65536];
  while (s.fd >= 0) {
    ssize_t k = ::read(s.fd, buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return;  // EAGAIN: nothing more now
    if (k == 0) {
      if (!s.partial.empty()) emit(w, s.partial, is_err);  // a last line without '\n'
      s.partial.clear();
      ::close(s.fd);
      s.fd = -1;
      return;
    }
    s.partial.append(buf, static_cast<size_t>(k));
    size_t start = 0, nl;
    while ((nl = s.partial.find('\n', start)) != std::string::npos) {
      emit(w, s.partial.substr(start, nl - start), is_err);
      start = nl + 1;
    }
    s.partial.erase(0, start);
    // A runaway line without newlines is cut rather than held forever.
    if (s.partial.size() > 1 << 20) {
      emit(w, s.partial, is_err);
      s.partial.clear();
    }
  }
}

void WorkerGroup::reap(bool block) {
  for (auto& w : workers_) {
    if (w.pid <= 0 || w.exited) continue;
    int st = 0;
    pid_t r;
    do { r = ::waitpid(w.pid, &st, block ? 0 : WNOHANG); } while (r < 0 && errno == EINTR);
    if (r != w.pid) continue;
    w.exited = true;
    w.exit = {w.spec.rank, w.spec.local_rank, w.pid, WIFEXITED(st) ? WEXITSTATUS(st) : 0,
              WIFSIGNALED(st) ? WTERMSIG(st) : 0};
    // What it wrote before exiting is in the pipes now; read it so a failure
    // report shows its real last lines.
    read_stream(w, w.out, false);
    read_stream(w, w.err, true);
    if (!stopping_ && !failed_ && (w.exit.code != 0 || w.exit.signal != 0)) {
      failed_ = true;
      first_failure_ = w.exit;
    }
  }
}

void WorkerGroup::pump(int timeout_ms, int extra_fd) {
  std::vector<pollfd> pfds;
  std::vector<std::pair<Worker*, bool>> who;
  for (auto& w : workers_)
    for (bool is_err : {false, true}) {
      Stream& s = is_err ? w.err : w.out;
      if (s.fd < 0) continue;
      pfds.push_back({s.fd, POLLIN, 0});
      who.push_back({&w, is_err});
    }
  if (extra_fd >= 0) pfds.push_back({extra_fd, POLLIN, 0});
  // Exits are noticed by polling waitpid, so sleep in short slices.
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    int slice = std::min(timeout_ms, 20);
    int n = ::poll(pfds.data(), pfds.size(), slice);
    if (n > 0)
      for (size_t i = 0; i < who.size(); ++i)
        if (pfds[i].revents) read_stream(*who[i].first, who[i].second ? who[i].first->err : who[i].first->out,
                                         who[i].second);
    size_t exited_before = 0;
    for (auto& w : workers_) exited_before += w.exited;
    reap(false);
    size_t exited_after = 0;
    for (auto& w : workers_) exited_after += w.exited;
    if (exited_after != exited_before) return;
    if (extra_fd >= 0 && n > 0 && pfds.back().revents) return;
    if (std::chrono::steady_clock::now() >= end) return;
    for (size_t i = 0; i < who.size(); ++i)
      if ((who[i].second ? who[i].first->err : who[i].first->out).fd < 0) pfds[i].fd = -1;  // poll ignores
  }
}

bool WorkerGroup::all_exited() const {
  for (const auto& w : workers_)
    if (!w.exited) return false;
  return true;
}

bool WorkerGroup::all_succeeded() const {
  for (const auto& w : workers_)
    if (!w.exited || w.exit.code != 0 || w.exit.signal != 0) return false;
  return true;
}

void WorkerGroup::stop(double grace_s) {
  stopping_ = true;
  for (auto& w : workers_)
    if (w.pid > 0 && !w.exited) ::kill(-w.pid, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  while (!all_exited() && std::chrono::steady_clock::now() < deadline) pump(50);
  // Whoever ignored SIGTERM, and anything left in the workers' process groups.
  for (auto& w : workers_)
    if (w.pid > 0) ::kill(-w.pid, SIGKILL);
  reap(true);
  // The rest of their output: pipes close once every process holding them is gone.
  auto drain_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (std::chrono::steady_clock::now() < drain_end) {
    bool open = false;
    for (auto& w : workers_) open |= w.out.fd >= 0 || w.err.fd >= 0;
    if (!open) break;
    pump(20);
  }
}

std::vector<std::string> WorkerGroup::last_lines(int local_rank) const {
  for (const auto& w : workers_)
    if (w.spec.local_rank == local_rank) return {w.tail.begin(), w.tail.end()};
  return {};
}

std::vector<pid_t> WorkerGroup::pids() const {
  std::vector<pid_t> p;
  for (const auto& w : workers_) p.push_back(w.pid);
  return p;
}

}  // namespace qk::dist
