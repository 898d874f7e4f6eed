#include "qk/dist/agent.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>

#include "qk/base/error.h"
#include "qk/base/launch_vars.h"
#include "qk/base/log.h"
#include "qk/qccl/store.h"
#include "rendezvous.h"
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

bool interrupted() { return g_signal != 0; }

void say(const std::string& msg) {
  std::string line = "qk run: " + msg + "\n";
  ssize_t r = ::write(2, line.data(), line.size());
  (void)r;
}

std::string node_list(const std::vector<int>& nodes) { return fmt::format("{}", fmt::join(nodes, ", ")); }

std::vector<WorkerSpec> make_specs(const AgentOptions& o, const Membership& m, int port, const std::string& token) {
  std::vector<WorkerSpec> specs;
  const int nodes = static_cast<int>(m.nodes.size());
  const int world = nodes * o.nproc_per_node;
  for (int l = 0; l < o.nproc_per_node; ++l) {
    WorkerSpec s;
    s.local_rank = l;
    s.rank = m.position * o.nproc_per_node + l;
    s.argv = o.command;
    s.env = {{"RANK", std::to_string(s.rank)},
             {"LOCAL_RANK", std::to_string(l)},
             {"WORLD_SIZE", std::to_string(world)},
             {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
             {"GROUP_RANK", std::to_string(m.position)},
             {"GROUP_WORLD_SIZE", std::to_string(nodes)},
             {"MASTER_ADDR", o.master_addr},
             {"MASTER_PORT", std::to_string(port)},
             {"QK_STORE_TOKEN", token},
             {"QK_RUN", "1"},
             {"QK_RESTART_COUNT", std::to_string(m.attempt)},
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
  if (o.min_nodes == 0) o.min_nodes = o.nnodes;
  QK_CHECK(o.min_nodes >= 1 && o.min_nodes <= o.nnodes, "--nnodes ", o.min_nodes, ":", o.nnodes,
           ": expected 1 <= MIN <= MAX");
  QK_CHECK(o.rdzv_last_call_s >= 0, "--rdzv-last-call: expected >= 0 seconds, got ", o.rdzv_last_call_s);
  QK_CHECK(o.heartbeat_timeout_s >= 2, "--heartbeat-timeout: expected >= 2 seconds (agents beat twice a second), got ",
           o.heartbeat_timeout_s);
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

  RendezvousOptions ro;
  ro.node_id = o.node_rank;
  ro.min_nodes = o.min_nodes;
  ro.max_nodes = o.nnodes;
  ro.nproc_per_node = o.nproc_per_node;
  ro.timeout_s = o.rdzv_timeout_s;
  ro.last_call_s = o.rdzv_last_call_s;
  ro.heartbeat_timeout_s = o.heartbeat_timeout_s;
  Rendezvous rdzv(store, ro, interrupted);

  int restarts = 0;                // failures restarted so far
  std::vector<int> last_nodes;     // the previous attempt's nodes
  for (int next = 0;; ) {
    const std::optional<Membership> joined = rdzv.join(next);
    if (!joined) return 128 + g_signal;
    const Membership& m = *joined;
    next = m.attempt + 1;
    if (o.min_nodes < o.nnodes && m.nodes != last_nodes) {
      const int world = static_cast<int>(m.nodes.size()) * o.nproc_per_node;
      say(last_nodes.empty()
              ? fmt::format("attempt {}: {} of {}..{} nodes ({}), world size {}", m.attempt, m.nodes.size(),
                            o.min_nodes, o.nnodes, node_list(m.nodes), world)
              : fmt::format("attempt {}: the nodes changed from {} to {} ({}): world size {} -> {}", m.attempt,
                            last_nodes.size(), m.nodes.size(), node_list(m.nodes),
                            static_cast<int>(last_nodes.size()) * o.nproc_per_node, world));
    }
    last_nodes = m.nodes;
    WorkerGroup group(o.tee_dir);
    group.start(make_specs(o, m, port, o.token), m.attempt);
    std::optional<Rendezvous::End> end;
    bool local_done = false;
    while (!end) {
      group.pump(100, g_sig_pipe[0]);
      if (g_signal) {
        int sig = g_signal;
        say(fmt::format("got signal {} (SIG{}); stopping {} workers", sig, ::sigabbrev_np(sig),
                        o.nproc_per_node));
        group.stop(o.grace_s);
        return 128 + sig;
      }
      if (const WorkerExit* f = group.first_failure()) {
        const bool fatal = f->signal == 0 && f->code == kExitWorldSizeRefused;
        std::string why = failure_text(*f, o, group.last_lines(f->local_rank));
        if (fatal)
          why += fmt::format("\nqk run: exit code {} means the job's layout does not fit {} ranks; not restarting",
                             kExitWorldSizeRefused, m.nodes.size() * o.nproc_per_node);
        rdzv.fail(m, why, fatal);
        end = Rendezvous::End{why, true, fatal};
        break;
      }
      if (!local_done && group.all_succeeded()) {
        local_done = true;
        if (o.node_rank != 0) {
          // Node 0 closes the store once it has every node's done key, so a
          // node's last store operation must be setting its own: look for a
          // failure first, then set it and leave. (Checking after setting
          // raced node 0's exit: "connection reset by peer" under load.)
          if (auto f = rdzv.failure(m)) {
            end = Rendezvous::End{*f, true, false};
            break;
          }
          try {
            rdzv.set_done(m);
          } catch (const Error& e) {
            // Node 0 leaves only after seeing this key (the store kept it and
            // closed before its reply reached us), or it died, which its own
            // exit status reports.
            QK_DEBUG("node {}: the store went away while confirming done: {}", o.node_rank, e.what());
          }
          group.stop(0);
          return 0;
        }
        rdzv.set_done(m);
      }
      // Node 0 keeps the store up until every node is done.
      if (local_done && rdzv.all_done(m)) {
        group.stop(0);
        return 0;
      }
      end = rdzv.watch(m);
    }
    group.stop(o.grace_s);
    const std::string first_line = end->why.substr(0, end->why.find('\n'));
    if (!end->failure) {
      say(fmt::format("{}; restarting all workers (not counted against --max-restarts)", first_line));
      continue;
    }
    if (!end->fatal && restarts < o.max_restarts) {
      ++restarts;
      say(fmt::format("{}; restarting all workers (restart {} of {})", first_line, restarts, o.max_restarts));
      continue;
    }
    try {
      rdzv.leave(m);
    } catch (const Error& e) {
      QK_DEBUG("node {}: could not say it leaves: {}", o.node_rank, e.what());
    }
    say(fmt::format("error: {}", end->why));
    if (!end->fatal)
      say(o.max_restarts ? fmt::format("gave up after {} restarts", o.max_restarts)
                         : std::string("no restarts allowed (--max-restarts 0)"));
    return 1;
  }
}

}  // namespace qk::dist
