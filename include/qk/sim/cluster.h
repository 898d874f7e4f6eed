// A cluster as `qk sim` sees it: the accelerator's peaks and the kernel
// efficiencies it reaches, its memory, the links inside a node and the
// network between nodes. From a JSON file (docs/sim.md, "The cluster file"),
// a shipped preset (`qk sim --list-clusters`) or this machine's calibration
// (`qk sim calibrate`, the preset `local`).
//
//   qk::sim::Cluster c = qk::sim::load_cluster("h100-sxm-ib400");   // a preset, or a path
//   c.device.peak_flops("bf16");                                     // 989e12
//   for (const auto& p : qk::sim::cluster_presets()) std::puts(p.name.c_str());
//
// Every published figure in a preset carries its source (`sources`, by field).
// A file that is not a valid cluster is a ValueError naming the field
// ("cluster file h.json: node.gpus: expected an integer >= 1, got 0").
#pragma once

#include <map>
#include <string>
#include <vector>

namespace qk::sim {

// One measured GEMM: C[m, n] = A[m, k] B[k, n] at `flops` per second.
struct GemmSample {
  int64_t m = 0, n = 0, k = 0;
  std::string dtype = "bf16";
  double flops = 0;
};

// What a GEMM reaches. With samples (a calibration) the nearest measured
// shape of the dtype decides; otherwise peak x efficiency x the wave
// quantization of tile_m x tile_n tiles over `units` processors (NVIDIA,
// "Matrix Multiplication Background User's Guide", ch. 3).
struct GemmModel {
  std::map<std::string, double> peak_flops;  // dense FLOP/s by dtype: "bf16", "fp16", "fp32", "tf32"
  double efficiency = 0.8;                   // the best fraction of peak a GEMM reaches
  int64_t tile_m = 128, tile_n = 256;
  int64_t units = 1;                         // streaming multiprocessors (1: no wave quantization)
  std::vector<GemmSample> samples;
};

// A streaming kernel kind as calibrated on this device: the rate its op
// reached at a few sizes, bytes counted as the model counts them
// (src/sim/stream_kinds.h). Between the sizes the rate is interpolated in
// log(bytes), outside them the nearest one holds: small calls run from
// cache or pay a fixed per-call cost, so the rate is not one number.
struct StreamSample {
  double bytes = 0;
  double gb_s = 0;
};
struct StreamKernel {
  std::vector<StreamSample> samples;  // by bytes, ascending
  double gb_s(double bytes) const;
};

struct Device {
  std::string model;
  GemmModel gemm;
  // Fused (flash) attention: fraction of the dtype's peak in forward and backward.
  double flash_forward_efficiency = 0.5;
  double flash_backward_efficiency = 0.4;
  double memory_gb = 80;                  // per device, GB (1e9 bytes)
  double memory_reserved_gb = 0;          // context, allocator slack: not usable for the model
  double memory_bandwidth_gb_s = 2000;    // peak, GB/s
  double memory_efficiency = 0.8;         // what streaming kernels (norms, elementwise, optimizer) reach
  double kernel_floor_us = 0;             // the shortest a kernel takes (launch and tail)
  // Calibrated kinds ("layer_norm.forward", "gelu.backward", ...: docs/sim.md);
  // a kind not here streams at memory_bandwidth_gb_s x memory_efficiency.
  std::map<std::string, StreamKernel> stream_kernels;
  // CPU devices (a calibration with --device cpu): the node's cores, shared
  // by the ranks on it; 0 for accelerators.
  int cpu_cores = 0;
  int threads_per_rank = 0;               // threads the calibration measured with
  // CPU devices: a rank's rate while every core of the node runs a rank, over
  // its rate alone (shared caches and memory bandwidth; a calibration
  // measures it with forked ranks). 1 for accelerators.
  double shared_efficiency = 1.0;
  // CPU devices: a rank's rate while the node runs twice as many one-thread
  // ranks as it has cores, over half its rate alone (time slicing: each
  // switch refills the caches); applied whenever ranks outnumber the cores
  // (in place of shared_efficiency, which it includes). 1: as fair sharing.
  double oversubscribed_efficiency = 1.0;

  double peak_flops(const std::string& dtype) const;  // ValueError for a dtype the file does not give
};

struct Link {
  std::string kind;          // "nvswitch", "nvlink", "pcie", "shm", "infiniband", "roce", "tcp"
  double bandwidth_gb_s = 0; // per device and direction (intra); per NIC (network), GB/s
  double latency_us = 0;
  double efficiency = 1.0;   // the fraction of bandwidth collectives reach
};

struct Network {
  Link nic;                 // one NIC
  int nics_per_node = 1;
  std::string topology = "fat-tree";  // "fat-tree" (full bisection), "rail", "single-switch"
};

struct Cluster {
  std::string name;
  std::string description;
  Device device;
  int gpus_per_node = 8;
  Link intra;               // between devices of one node
  Network network;          // between nodes
  std::map<std::string, std::string> sources;  // field -> where its figure comes from
  std::string calibrated;   // "qk sim calibrate --device cpu, 2026-12-05 ..." for a calibration file

  // Aggregate inter-node bandwidth of one node, GB/s (NICs x bandwidth x efficiency).
  double node_network_gb_s() const;
};

// Parses a cluster (ValueError naming the field and `origin`, the file).
Cluster parse_cluster(const std::string& json, const std::string& origin = "cluster");
std::string cluster_to_json(const Cluster& c);

struct ClusterPreset {
  std::string name;
  std::string description;
};
// The shipped presets (embedded in the library), and `local`.
std::vector<ClusterPreset> cluster_presets();
// A preset's name or a file path. `local` is this machine's calibration
// file (calibration_path()); a missing one says to run `qk sim calibrate`.
// ValueError for an unknown name that is not a file either (listing the presets).
Cluster load_cluster(const std::string& name_or_path);

// Where `qk sim calibrate` writes and `local` reads: QK_SIM_CALIBRATION, else
// $XDG_CACHE_HOME/qianka/sim-local.json (~/.cache/qianka/sim-local.json).
std::string calibration_path();

}  // namespace qk::sim
