// `qk sim calibrate`: this machine's rates, measured, as a cluster file (the
// preset `local`): GEMMs over the shapes training uses, flash attention
// forward and backward, the streaming kernels (norms, elementwise, the fused
// optimizer step) as bytes per second, the shortest kernel, and qccl's
// latency and bandwidth between two ranks of this host (an all-reduce of 8
// bytes and of several MiB, forked ranks over shared memory).
//
//   qk::sim::CalibrateOptions o;                 // device "cpu", the threads a rank gets
//   qk::sim::Cluster local = qk::sim::calibrate(o, [](const std::string& line) { std::puts(line.c_str()); });
//   qk::atomic_write_file(qk::sim::calibration_path(), qk::sim::cluster_to_json(local));
#pragma once

#include <functional>
#include <string>

#include "qk/sim/cluster.h"

namespace qk::sim {

struct CalibrateOptions {
  std::string device = "cpu";  // "cpu" or "cuda" (where the CUDA backend is built)
  // Threads one rank computes with (0: this process's pool size). `qk run`
  // gives each of N local ranks cores / N.
  int threads = 0;
  int ranks_per_node = 0;       // devices per node in the file (0: cores / threads)
  bool quick = false;           // fewer shapes and repetitions (tests)
  bool measure_links = true;    // fork two ranks for qccl's latency and bandwidth
};

// Measures and returns the cluster; `progress` gets one line per measurement.
// ValueError for an unknown device or one this build has not got.
Cluster calibrate(const CalibrateOptions& o, const std::function<void(const std::string&)>& progress = {});

}  // namespace qk::sim
