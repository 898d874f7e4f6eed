// Each cost piece against values worked out by hand (test_cluster.h's round figures).
#include "costs.h"

#include <gtest/gtest.h>

#include <cmath>

#include "test_cluster.h"

namespace qk::sim {
namespace {

using qccl::Collective;

TEST(DeviceRates, GemmIsFlopsOverPeakTimesEfficiency) {
  const Cluster c = test::round_cluster();
  const DeviceRates r(c, "bf16", 4);
  // 2 x 1024^3 FLOPs at 100e12 x 0.5.
  EXPECT_NEAR(r.gemm(1024, 1024, 1024), 2.0 * 1024 * 1024 * 1024 / 50e12, 1e-12);
  EXPECT_DOUBLE_EQ(r.gemm_rate(7, 9, 11), 50e12);
  EXPECT_EQ(r.gemm(0, 5, 5), 0);
}

TEST(DeviceRates, WaveQuantizationLeavesProcessorsIdle) {
  Cluster c = test::round_cluster();
  c.device.gemm.units = 4;
  c.device.gemm.tile_m = 128;
  c.device.gemm.tile_n = 256;
  const DeviceRates r(c, "bf16", 4);
  // 256 x 256: two tiles of 128 x 256 on 4 processors, one wave: half busy.
  EXPECT_DOUBLE_EQ(r.gemm_rate(256, 256, 64), 50e12 * 0.5);
  // 512 x 512: 8 tiles, 2 full waves.
  EXPECT_DOUBLE_EQ(r.gemm_rate(512, 512, 64), 50e12);
  // 100 x 100: one tile padded from 100 x 100 to 128 x 256 on 1 of 4 processors.
  EXPECT_DOUBLE_EQ(r.gemm_rate(100, 100, 64), 50e12 * (100.0 * 100) / (4 * 128 * 256));
}

TEST(DeviceRates, MeasuredGemmsInterpolateInLogFlops) {
  Cluster c = test::round_cluster();
  c.device.gemm.samples = {{100, 100, 100, "bf16", 10e12}, {1000, 1000, 1000, "bf16", 40e12}};
  const DeviceRates r(c, "bf16", 1);
  EXPECT_DOUBLE_EQ(r.gemm_rate(50, 50, 50), 10e12);        // below the smallest: the smallest
  EXPECT_DOUBLE_EQ(r.gemm_rate(2000, 2000, 2000), 40e12);  // above the largest: the largest
  // sqrt(10) x the smaller one in each dim: halfway in log(FLOPs).
  const double mid = 100 * std::pow(10.0, 0.5);
  EXPECT_NEAR(r.gemm_rate(mid, mid, mid), 25e12, 1e3);
}

// A batched GEMM on a CPU device is one GEMM per matrix: each at the rate
// measured for its own size; on an accelerator the batch fills the device
// together, at the rate of the whole batch's FLOPs.
TEST(DeviceRates, BatchedGemmsOnACpuRunAtOneMatrixsRate) {
  Cluster c = test::round_cluster();
  c.device.gemm.samples = {{100, 100, 100, "bf16", 10e12}, {1000, 1000, 1000, "bf16", 40e12}};
  EXPECT_DOUBLE_EQ(DeviceRates(c, "bf16", 1).gemm_rate(100, 100, 100, 1000), 40e12);
  c.device.cpu_cores = 2;
  const DeviceRates cpu(c, "bf16", 1);
  EXPECT_DOUBLE_EQ(cpu.gemm_rate(100, 100, 100, 1000), 10e12);
  EXPECT_DOUBLE_EQ(cpu.gemm(100, 100, 100, 1000), 1000 * cpu.gemm(100, 100, 100));
}

TEST(DeviceRates, StreamingFlashAndTheKernelFloor) {
  Cluster c = test::round_cluster();
  const DeviceRates r(c, "bf16", 4);
  EXPECT_NEAR(r.stream(1e9), 1e9 / (1000e9 * 0.5), 1e-15);  // 2 ms
  EXPECT_NEAR(r.flash_forward(1e12), 1e12 / (100e12 * 0.5), 1e-15);
  EXPECT_NEAR(r.flash_backward(1e12), 1e12 / (100e12 * 0.25), 1e-15);
  c.device.kernel_floor_us = 5;
  const DeviceRates floored(c, "bf16", 4);
  EXPECT_DOUBLE_EQ(floored.gemm(8, 8, 8), 5e-6);
  EXPECT_DOUBLE_EQ(floored.stream(8), 5e-6);
}

TEST(DeviceRates, CalibratedStreamingKindsTakeTheirOwnRate) {
  Cluster c = test::round_cluster();
  c.device.stream_kernels["gelu.forward"].samples = {{1e4, 1}, {1e6, 3}};
  const DeviceRates r(c, "bf16", 1);
  const StreamKernel& k = c.device.stream_kernels.at("gelu.forward");
  EXPECT_DOUBLE_EQ(k.gb_s(1e3), 1);  // below the smallest size: its rate
  EXPECT_DOUBLE_EQ(k.gb_s(1e8), 3);  // above the largest: its rate
  EXPECT_NEAR(k.gb_s(1e5), 2, 1e-12);  // halfway in log(bytes)
  EXPECT_NEAR(r.stream("gelu.forward", {4e4, 6e4}), 1e5 / 2e9, 1e-18);  // the pieces as one call
  // A kind not calibrated: each piece at the device's streaming bandwidth (1000 GB/s x 0.5).
  EXPECT_NEAR(r.stream("gelu.backward", {4e4, 6e4}), 1e5 / 500e9, 1e-18);
  EXPECT_NEAR(r.stream("gelu.backward", {4e4, 0}), 4e4 / 500e9, 1e-18);  // no piece: no kernel
  c.device.kernel_floor_us = 5;
  c.device.cpu_cores = 1;
  c.device.threads_per_rank = 1;
  const DeviceRates shared(c, "bf16", 2);  // two one-thread ranks on one core: half the rate each
  EXPECT_NEAR(shared.stream("gelu.forward", {1e6}), 1e6 / 1.5e9, 1e-15);
  EXPECT_DOUBLE_EQ(shared.stream("gelu.forward", {1}), 5e-6);  // the floor
}

// Work the published stacks fuse away is priced only where a calibration measured it.
TEST(DeviceRates, SomeKindsCostNothingUncalibrated) {
  Cluster c = test::round_cluster();
  EXPECT_EQ(DeviceRates(c, "bf16", 1).stream_if_calibrated("grad_accumulate", 1e9), 0);
  c.device.stream_kernels["grad_accumulate"].samples = {{1e6, 2}, {1e8, 4}};
  const DeviceRates r(c, "bf16", 1);
  EXPECT_NEAR(r.stream_if_calibrated("grad_accumulate", 1e8), 1e8 / 4e9, 1e-15);
  EXPECT_EQ(r.stream_if_calibrated("grad_accumulate", 0), 0);
}

TEST(DeviceRates, CpuRanksShareTheCores) {
  Cluster c = test::round_cluster();
  c.device.cpu_cores = 2;
  c.device.threads_per_rank = 1;
  EXPECT_DOUBLE_EQ(DeviceRates(c, "bf16", 2).contention(), 1.0);
  EXPECT_DOUBLE_EQ(DeviceRates(c, "bf16", 4).contention(), 0.5);  // 4 one-thread ranks on 2 cores
  EXPECT_DOUBLE_EQ(DeviceRates(c, "bf16", 4).gemm_rate(8, 8, 8), 25e12);
  // Ranks that share the host's caches and memory bandwidth run at the
  // calibrated fraction of their rate alone; one rank alone at all of it.
  c.device.shared_efficiency = 0.8;
  EXPECT_DOUBLE_EQ(DeviceRates(c, "bf16", 1).contention(), 1.0);
  EXPECT_DOUBLE_EQ(DeviceRates(c, "bf16", 2).contention(), 0.8);
  EXPECT_DOUBLE_EQ(DeviceRates(c, "bf16", 2).gemm_rate(8, 8, 8), 40e12);
  // More ranks than cores: each its share of the cores at the calibrated
  // time-slicing efficiency (which includes the sharing's).
  EXPECT_DOUBLE_EQ(DeviceRates(c, "bf16", 4).contention(), 0.5);
  c.device.oversubscribed_efficiency = 0.9;
  EXPECT_DOUBLE_EQ(DeviceRates(c, "bf16", 4).contention(), 0.45);
  EXPECT_DOUBLE_EQ(DeviceRates(c, "bf16", 8).contention(), 0.225);
  c.device.cpu_cores = 0;  // an accelerator: its own memory, no sharing
  EXPECT_DOUBLE_EQ(DeviceRates(c, "bf16", 8).contention(), 1.0);
}

// While only some of the node's ranks compute (the others wait on a
// pipeline hand-over), each gets the share of the cores that many would.
TEST(DeviceRates, FewerRanksComputingRunFaster) {
  Cluster c = test::round_cluster();
  c.device.cpu_cores = 2;
  c.device.threads_per_rank = 1;
  c.device.shared_efficiency = 0.8;
  c.device.oversubscribed_efficiency = 0.9;
  const DeviceRates four(c, "bf16", 4);  // the rates assume all four computing: 0.45 each
  EXPECT_DOUBLE_EQ(four.speed_with(4), 1.0);
  EXPECT_DOUBLE_EQ(four.speed_with(3), (2.0 / 3.0 * 0.9) / 0.45);
  EXPECT_DOUBLE_EQ(four.speed_with(2), 0.8 / 0.45);  // a core each, sharing the caches
  EXPECT_DOUBLE_EQ(four.speed_with(1), 1.0 / 0.45);  // alone
  const DeviceRates two(c, "bf16", 2);
  EXPECT_DOUBLE_EQ(two.speed_with(2), 1.0);
  EXPECT_DOUBLE_EQ(two.speed_with(1), 1.0 / 0.8);
  c.device.cpu_cores = 0;  // accelerators: each rank has its own
  EXPECT_DOUBLE_EQ(DeviceRates(c, "bf16", 8).speed_with(1), 1.0);
}

TEST(GroupPlacement, GroupsAcrossNodes) {
  const Cluster c = test::round_cluster();  // 4 per node
  // tensor-parallel 4 of 16: one node.
  GroupPlacement g = place_group(c, 4, 1, 16);
  EXPECT_EQ(g.per_node, 4);
  EXPECT_EQ(g.nodes, 1);
  EXPECT_EQ(g.groups_sharing_node, 1);
  // data-parallel 4 with tensor size 4: one rank per node, 4 groups through each node.
  g = place_group(c, 4, 4, 16);
  EXPECT_EQ(g.per_node, 1);
  EXPECT_EQ(g.nodes, 4);
  EXPECT_EQ(g.groups_sharing_node, 4);
  // data-parallel 8 with tensor size 2: 2 per node over 4 nodes, 2 groups per node.
  g = place_group(c, 8, 2, 16);
  EXPECT_EQ(g.per_node, 2);
  EXPECT_EQ(g.nodes, 4);
  EXPECT_EQ(g.groups_sharing_node, 2);
}

TEST(Collectives, RingAllReduceInsideANode) {
  const Cluster c = test::round_cluster(80, 1e12);  // reductions as good as free
  const DeviceRates r(c, "bf16", 4);
  const GroupPlacement g = place_group(c, 4, 1, 4);
  std::string algo;
  // Ring: 2(n-1) steps of S/n: 6 x 100 MB / 100 GB/s = 6 ms.
  EXPECT_NEAR(collective_seconds(c, Collective::all_reduce, g, 400e6, r, &algo), 6e-3, 1e-8);
  EXPECT_EQ(algo, "ring");
  // All-gather and reduce-scatter: n-1 steps of S/n.
  EXPECT_NEAR(collective_seconds(c, Collective::all_gather, g, 400e6, r), 3e-3, 1e-8);
  EXPECT_NEAR(collective_seconds(c, Collective::reduce_scatter, g, 400e6, r), 3e-3, 1e-8);
  EXPECT_EQ(collective_seconds(c, Collective::all_reduce, place_group(c, 1, 1, 4), 400e6, r), 0);
}

TEST(Collectives, HierarchicalAcrossNodesWhereItWins) {
  const Cluster c = test::round_cluster(80, 1e12);
  const DeviceRates r(c, "bf16", 8);
  const GroupPlacement g = place_group(c, 8, 1, 8);  // 2 nodes x 4
  ASSERT_EQ(g.nodes, 2);
  ASSERT_EQ(g.per_node, 4);
  // Node network: 4 x 10 GB/s = 40 GB/s. Flat ring, the slowest link every
  // step: 14 x 50 MB / 40 GB/s = 17.5 ms. Hierarchical: 2 x 3 x (100 MB /
  // 100 GB/s) inside + 2 x 1 x (200 MB / 40 GB/s) across = 6 + 10 = 16 ms.
  std::string algo;
  EXPECT_NEAR(collective_seconds(c, Collective::all_reduce, g, 400e6, r, &algo), 16e-3, 1e-8);
  EXPECT_EQ(algo, "hierarchical");
}

TEST(Collectives, GroupsSharingANodeShareItsNetwork) {
  const Cluster c = test::round_cluster(80, 1e12);
  const DeviceRates r(c, "bf16", 4);
  // Data-parallel 2 with tensor size 4: one rank on each of 2 nodes, and the
  // node's 4 data-parallel groups get a quarter of its 40 GB/s each. Ring
  // of 2: 2 steps of 50 MB at 10 GB/s: 10 ms.
  const GroupPlacement g = place_group(c, 2, 4, 8);
  EXPECT_EQ(g.groups_sharing_node, 4);
  EXPECT_NEAR(collective_seconds(c, Collective::all_reduce, g, 100e6, r), 10e-3, 1e-8);
}

TEST(PointToPoint, InsideAndAcrossNodes) {
  Cluster c = test::round_cluster();
  EXPECT_NEAR(p2p_seconds(c, false, 100e6), 1e-3, 1e-12);  // 100 MB at 100 GB/s
  // Across: each of the node's 4 ranks gets one NIC's 10 GB/s.
  EXPECT_NEAR(p2p_seconds(c, true, 100e6), 10e-3, 1e-12);
  c.network.nic.latency_us = 7;
  EXPECT_EQ(p2p_seconds(c, true, 0.0), 0);
  EXPECT_NEAR(p2p_seconds(c, true, 1e6), 7e-6 + 1e-4, 1e-12);
}

}  // namespace
}  // namespace qk::sim
