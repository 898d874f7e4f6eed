// `qk run`: torchrun for qianka. Starts N workers on this node with RANK,
// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// QK_RESTART_COUNT (and the store token) set; see docs/dist.md.
//
//   qk run --nproc-per-node 2 -- qk perf all_reduce
//   qk run --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500
//          --nproc-per-node 4 --max-restarts 3 -- ./train
//   qk run --nnodes 1:4 ...        # elastic: goes on with 1 to 4 nodes
#include <memory>
#include <tuple>

#include "command.h"
#include "qk/dist/agent.h"

namespace qk::cli {
namespace {

void setup_run(CLI::App& app) {
  auto o = std::make_shared<dist::AgentOptions>();
  app.add_option("--nproc-per-node,--nproc_per_node", o->nproc_per_node, "Workers on this node")
      ->capture_default_str();
  auto nnodes = std::make_shared<std::string>("1");
  app.add_option("--nnodes", *nnodes,
                 "Nodes in the job: N, or MIN:MAX for an elastic job that goes on with fewer nodes after one is "
                 "lost (and takes in nodes that join, up to MAX)")
      ->capture_default_str();
  app.add_option("--node-rank,--node_rank", o->node_rank, "This node's index (node 0 hosts the store)")
      ->capture_default_str();
  app.add_option("--master-addr,--master_addr", o->master_addr, "Address of node 0")->capture_default_str();
  app.add_option("--master-port,--master_port", o->master_port,
                 "Port of node 0's store (0: any free port; needed with --nnodes > 1)")
      ->capture_default_str();
  app.add_option("--max-restarts,--max_restarts", o->max_restarts,
                 "Restarts of the whole group after a worker fails")
      ->capture_default_str();
  app.add_option("--tee", o->tee_dir, "Also write each rank's output to DIR/rank<R>.log");
  app.add_option("--rdzv-timeout", o->rdzv_timeout_s, "Seconds to wait for all nodes (elastic: for MIN)")
      ->capture_default_str();
  app.add_option("--rdzv-last-call", o->rdzv_last_call_s,
                 "Elastic jobs, first attempt: seconds to wait for more nodes once MIN have joined")
      ->capture_default_str();
  app.add_option("--heartbeat-timeout", o->heartbeat_timeout_s,
                 "Seconds without a heartbeat from a node's agent before node 0 takes that node as lost")
      ->capture_default_str();
  app.add_option("--rdzv-token", o->token,
                 "Store token shared by all nodes (default: QK_STORE_TOKEN; generated with one node)");
  app.add_option("--grace", o->grace_s, "Seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str();
  app.add_option("command", o->command, "The program and its arguments (after --)")->expected(-1);
  app.footer("Workers get RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, "
             "MASTER_ADDR, MASTER_PORT, QK_RESTART_COUNT, QK_STORE_TOKEN and QK_RUN=1. A worker that exits with "
             "78 (its layout does not fit WORLD_SIZE) ends the job without a restart. See docs/dist.md.");
  app.callback([o, nnodes] {
    std::tie(o->min_nodes, o->nnodes) = dist::parse_nnodes(*nnodes);
    int code = dist::run_agent(*o);
    if (code) exit_with(code);
  });
}

}  // namespace

QK_REGISTER_COMMAND(run, "Launch a distributed job: N workers per node, rendezvous, restarts", setup_run);

}  // namespace qk::cli
