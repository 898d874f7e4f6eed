// The `qk run` agent: one per node. Node 0's agent hosts the rendezvous
// store; every agent meets the others there for each attempt, starts its
// node's workers with RANK, LOCAL_RANK, WORLD_SIZE, ... set, forwards their
// output, and when any worker anywhere fails, stops its own and starts the
// whole group again, up to max_restarts times.
//
// Elastic jobs (min_nodes < nnodes, `qk run --nnodes MIN:MAX`): an attempt
// starts with every node that is there; after a node is lost (its workers
// failed and its agent gave up, or its heartbeats stopped) the next attempt
// runs on the nodes that remain, as long as there are at least min_nodes, and
// a node that joins later makes the group restart with it (not counted as a
// restart). Ranks are numbered by node rank among the attempt's nodes, so
// WORLD_SIZE changes with them; the program resumes from its checkpoint at
// the new size (qk pretrain-gpt keeps the global batch with more
// accumulation). A worker that exits with kExitWorldSizeRefused (78: "this
// layout cannot run on WORLD_SIZE ranks") ends the job instead of a restart.
// The rendezvous protocol and its store keys: src/dist/rendezvous.h.
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
#include <utility>
#include <vector>

namespace qk::dist {

struct AgentOptions {
  int nproc_per_node = 1;
  int nnodes = 1;             // the most nodes (MAX of --nnodes MIN:MAX)
  int min_nodes = 0;          // the fewest an attempt runs on (0: nnodes; no elasticity)
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;       // 0: any free port (one node only)
  int max_restarts = 0;
  std::string tee_dir;       // "": no log files
  double rdzv_timeout_s = 300;
  double rdzv_last_call_s = 5;      // first attempt: after min_nodes joined, wait this long for more
  double heartbeat_timeout_s = 15;  // a node silent this long is taken as lost
  double grace_s = 5;        // SIGTERM -> SIGKILL
  std::string token;         // "": generate (one node); required with nnodes > 1
  std::vector<std::string> command;
};

// Runs the job to the end; returns the exit status for `qk run` (0: every
// worker succeeded; 1: failed after the restarts, with the report printed;
// 128 + signal when interrupted).
int run_agent(const AgentOptions& opts);

// --nnodes: "2" -> {2, 2}; "1:4" -> {1, 4} (torchrun's MIN:MAX); ValueError otherwise.
std::pair<int, int> parse_nnodes(const std::string& s);

}  // namespace qk::dist
