// The `qk run` agent: one per node. Node 0's agent hosts the rendezvous
// store; every agent meets the others there for each attempt, starts its
// node's workers with RANK, LOCAL_RANK, WORLD_SIZE, ... set, forwards their
// output, and when any worker anywhere fails, stops its own and starts the
// whole group again, up to max_restarts times.
//
// Store keys of attempt k (all under "run/k/"):
//   node/<i>      node i joined (value: its host and nproc)
//   failed        the first failure's description; every agent watches it
//   done/<i>      node i's workers all exited 0
//
// `qk run` is a thin front end over it; a program can launch a job the same way:
//
//   qk::dist::AgentOptions o;
//   o.nproc_per_node = 4;
//   o.max_restarts = 2;
//   o.command = {"./train", "--epochs", "3"};
//   int status = qk::dist::run_agent(o);   // as `qk run --nproc-per-node 4 ...`
#pragma once

#include <string>
#include <vector>

namespace qk::dist {

struct AgentOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;       // 0: any free port (one node only)
  int max_restarts = 0;
  std::string tee_dir;       // "": no log files
  double rdzv_timeout_s = 300;
  double grace_s = 5;        // SIGTERM -> SIGKILL
  std::string token;         // "": generate (one node); required with nnodes > 1
  std::vector<std::string> command;
};

// Runs the job to the end; returns the exit status for `qk run` (0: every
// worker succeeded; 1: failed after the restarts, with the report printed;
// 128 + signal when interrupted).
int run_agent(const AgentOptions& opts);

}  // namespace qk::dist
