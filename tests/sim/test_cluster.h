// A cluster with round figures, so costs can be worked out by hand.
#pragma once

#include <string>

#include "qk/sim/cluster.h"

namespace qk::sim::test {

// 4 devices per node, peak 100 TFLOP/s (bf16), GEMMs at half of it without
// wave quantization, memory at half its bandwidth, flash attention at half
// forward and a quarter backward; 100 GB/s inside a node, 4 NICs of 10 GB/s
// between nodes; no latencies, no kernel floor.
inline std::string round_cluster_json(double memory_gb = 80, double bandwidth_gb_s = 1000) {
  return R"({
  "name": "round",
  "gpus_per_node": 4,
  "device": {
    "model": "round numbers",
    "peak_tflops": {"bf16": 100, "fp32": 10},
    "gemm": {"efficiency": 0.5, "units": 1},
    "flash_forward_efficiency": 0.5,
    "flash_backward_efficiency": 0.25,
    "memory_gb": )" + std::to_string(memory_gb) + R"(,
    "memory_bandwidth_gb_s": )" + std::to_string(bandwidth_gb_s) + R"(,
    "memory_efficiency": 0.5,
    "kernel_floor_us": 0
  },
  "intra": {"kind": "nvswitch", "bandwidth_gb_s": 100, "latency_us": 0},
  "network": {"nic": {"kind": "infiniband", "bandwidth_gb_s": 10, "latency_us": 0}, "nics_per_node": 4}
})";
}

inline Cluster round_cluster(double memory_gb = 80, double bandwidth_gb_s = 1000) {
  return parse_cluster(round_cluster_json(memory_gb, bandwidth_gb_s), "round");
}

}  // namespace qk::sim::test
