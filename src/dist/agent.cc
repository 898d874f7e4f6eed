#include "qk/dist/agent.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>

#include "qk/base/error.h"
#include "qk/base/launch_vars.h"
#include "qk/base/log.h"
#include "qk/qccl/store.h"
#include "worker_group.h"

namespace qk::dist {
namespace {

using Clock = std::chrono::steady_clock;

// Signals reach the agent's loop through a pipe, so a poll wakes at once.
int g_sig_pipe[2] = {-1, -1};
volatile sig_atomic_t g_signal = 0;

void on_signal(int sig) {
  if (g_signal == 0) g_signal = sig;
  char b = static_cast<char>(sig);
  ssize_t r = ::write(g_sig_pipe[1], &b, 1);
  (void)r;
}

void install_signals() {
  if (g_sig_pipe[0] < 0) QK_SYSCALL(::pipe2(g_sig_pipe, O_CLOEXEC | O_NONBLOCK));
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

std::string hostname() {
  char h[256] = {0};
  ::gethostname(h, sizeof h - 1);
  return h;
}

std::string key(int attempt, const std::string& rest) { return fmt::format("run/{}/{}", attempt, rest); }

void say(const std::string& msg) {
  std::string line = "qk run: " + msg + "\n";
  ssize_t r = ::write(2, line.data(), line.size());
  (void)r;
}

// Waits for every node of an attempt, in short slices so a signal interrupts it.
void rendezvous(qk::qccl::Store& store, const AgentOptions& o, int attempt) {
  store.set(key(attempt, fmt::format("node/{}", o.node_rank)),
            fmt::format("{} nproc {}", hostname(), o.nproc_per_node));
  std::vector<std::string> keys;
  for (int i = 0; i < o.nnodes; ++i) keys.push_back(key(attempt, fmt::format("node/{}", i)));
  auto end = Clock::now() + std::chrono::duration<double>(o.rdzv_timeout_s);
  while (true) {
    double left = std::chrono::duration<double>(end - Clock::now()).count();
    try {
      store.wait(keys, std::max(0.0, std::min(0.5, left)));
      break;
    } catch (const TimeoutError& e) {
      if (g_signal) return;
      if (left > 0.5) continue;
      std::string nodes;
      for (const auto& k : qk::qccl::missing_keys_of(e.message()))
        nodes += (nodes.empty() ? "" : ", ") + k.substr(k.rfind('/') + 1);
      QK_THROW(TimeoutError, "rendezvous (attempt ", attempt, ") at ", store.address(), " timed out after ",
               o.rdzv_timeout_s, " s: node(s) ", nodes, " of ", o.nnodes, " never joined (start `qk run "
               "--nnodes ", o.nnodes, " --node-rank I ...` on each, with the same --master-addr/--master-port "
               "and QK_STORE_TOKEN; --rdzv-timeout sets the deadline)");
    }
  }
  for (const auto& k : keys) {
    std::string v = store.get(k);
    QK_CHECK(v.size() >= 8 && v.substr(v.rfind(' ') + 1) == std::to_string(o.nproc_per_node),
             "rendezvous: ", k, " is '", v, "', but this node runs --nproc-per-node ", o.nproc_per_node,
             "; every node must use the same value");
  }
}

std::vector<WorkerSpec> make_specs(const AgentOptions& o, int port, const std::string& token, int attempt) {
  std::vector<WorkerSpec> specs;
  int world = o.nnodes * o.nproc_per_node;
  for (int l = 0; l < o.nproc_per_node; ++l) {
    WorkerSpec s;
    s.local_rank = l;
    s.rank = o.node_rank * o.nproc_per_node + l;
    s.argv = o.command;
    s.env = {{"RANK", std::to_string(s.rank)},
             {"LOCAL_RANK", std::to_string(l)},
             {"WORLD_SIZE", std::to_string(world)},
             {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
             {"GROUP_RANK", std::to_string(o.node_rank)},
             {"MASTER_ADDR", o.master_addr},
             {"MASTER_PORT", std::to_string(port)},
             {"QK_STORE_TOKEN", token},
             {"QK_RUN", "1"},
             {"QK_RESTART_COUNT", std::to_string(attempt)},
             {"QK_MAX_RESTARTS", std::to_string(o.max_restarts)}};
    specs.push_back(std::move(s));
  }
  return specs;
}

std::string failure_text(const WorkerExit& f, const AgentOptions& o, const std::vector<std::string>& lines) {
  std::string s = fmt::format("rank {} (local rank {} on node {}, pid {}) {}", f.rank, f.local_rank, o.node_rank,
                              f.pid, f.describe());
  if (!lines.empty()) {
    s += fmt::format("\nqk run: last {} lines of rank {}:", lines.size(), f.rank);
    for (const auto& l : lines) s += fmt::format("\n  [rank{}]: {}", f.rank, l);
  }
  return s;
}

}  // namespace

int run_agent(const AgentOptions& in) {
  AgentOptions o = in;
  QK_CHECK(o.nproc_per_node >= 1 && o.nproc_per_node <= 1024, "--nproc-per-node: expected 1..1024, got ",
           o.nproc_per_node);
  QK_CHECK(o.nnodes >= 1, "--nnodes: expected >= 1, got ", o.nnodes);
  QK_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes, "--node-rank: expected 0..", o.nnodes - 1, ", got ",
           o.node_rank);
  QK_CHECK(o.max_restarts >= 0, "--max-restarts: expected >= 0, got ", o.max_restarts);
  QK_CHECK(!o.command.empty(), "qk run: no command given; usage: qk run --nproc-per-node N -- CMD ARGS");
  QK_CHECK(o.master_port >= 0 && o.master_port < 65536, "--master-port: expected 0..65535, got ", o.master_port);
  if (o.token.empty()) {
    if (auto t = env::launch::store_token.lookup()) o.token = *t;
  }
  if (o.token.empty()) {
    QK_CHECK(o.nnodes == 1, "--nnodes ", o.nnodes, ": every node needs the same store token; set "
             "QK_STORE_TOKEN to one secret on all nodes (e.g. export QK_STORE_TOKEN=$(openssl rand -hex 16)) "
             "or pass --rdzv-token");
    o.token = qccl::random_store_token();
  }
  if (o.master_port == 0) {
    QK_CHECK(o.nnodes == 1, "--nnodes ", o.nnodes, ": give --master-port (the port node 0 listens on)");
  }
  install_signals();
  g_signal = 0;

  std::unique_ptr<qk::qccl::StoreServer> server;
  int port = o.master_port;
  if (o.node_rank == 0) {
    server = std::make_unique<qk::qccl::StoreServer>(static_cast<uint16_t>(port), o.token);
    port = server->port();
  }
  qk::qccl::Store store(o.master_addr, static_cast<uint16_t>(port), o.token, o.rdzv_timeout_s);

  for (int attempt = 0;; ++attempt) {
    rendezvous(store, o, attempt);
    if (g_signal) return 128 + g_signal;
    WorkerGroup group(o.tee_dir);
    group.start(make_specs(o, port, o.token, attempt), attempt);
    std::string failure;      // this attempt's first failure, anywhere
    bool local_done = false;
    auto next_check = Clock::now();
    std::vector<std::string> done_keys;
    for (int i = 0; i < o.nnodes; ++i) done_keys.push_back(key(attempt, fmt::format("done/{}", i)));
    while (true) {
      group.pump(100, g_sig_pipe[0]);
      if (g_signal) {
        int sig = g_signal;
        say(fmt::format("got signal {} (SIG{}); stopping {} workers", sig, ::sigabbrev_np(sig),
                        o.nproc_per_node));
        group.stop(o.grace_s);
        return 128 + sig;
      }
      if (const WorkerExit* f = group.first_failure()) {
        failure = failure_text(*f, o, group.last_lines(f->local_rank));
        if (!store.check({key(attempt, "failed")})) store.set(key(attempt, "failed"), failure);
        break;
      }
      if (!local_done && group.all_succeeded()) {
        local_done = true;
        if (o.node_rank != 0) {
          // Node 0 closes the store once it has every node's done key, so a
          // node's last store operation must be setting its own: look for a
          // failure first, then set it and leave. (Checking after setting
          // raced node 0's exit: "connection reset by peer" under load.)
          if (auto f = store.try_get(key(attempt, "failed"))) {
            failure = *f;
            break;
          }
          try {
            store.set(key(attempt, fmt::format("done/{}", o.node_rank)), "ok");
          } catch (const Error& e) {
            // Node 0 leaves only after seeing this key (the store kept it and
            // closed before its reply reached us), or it died, which its own
            // exit status reports.
            QK_DEBUG("node {}: the store went away while confirming done: {}", o.node_rank, e.what());
          }
          group.stop(0);
          return 0;
        }
        store.set(key(attempt, fmt::format("done/{}", o.node_rank)), "ok");
      }
      if (Clock::now() >= next_check || local_done) {
        next_check = Clock::now() + std::chrono::milliseconds(250);
        if (auto f = store.try_get(key(attempt, "failed"))) {
          failure = *f;
          break;
        }
        // Node 0 keeps the store up until every node is done.
        if (local_done && (o.node_rank != 0 || store.check(done_keys))) {
          group.stop(0);
          return 0;
        }
      }
    }
    group.stop(o.grace_s);
    if (attempt < o.max_restarts) {
      auto first_line = failure.substr(0, failure.find('\n'));
      say(fmt::format("{}; restarting all workers (restart {} of {})", first_line, attempt + 1, o.max_restarts));
      continue;
    }
    say(fmt::format("error: {}", failure));
    say(o.max_restarts ? fmt::format("gave up after {} restarts", o.max_restarts)
                       : std::string("no restarts allowed (--max-restarts 0)"));
    return 1;
  }
}

}  // namespace qk::dist
