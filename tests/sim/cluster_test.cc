// Cluster files: the presets, errors that name the field, the round trip, `local`.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "common/scratch_dir.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/sim/cluster.h"
#include "test_cluster.h"

namespace qk::sim {
namespace {

std::string error_of(const std::string& json) {
  try {
    parse_cluster(json, "bad.json");
  } catch (const ValueError& e) {
    return e.message();
  }
  return "(no error)";
}

// The round cluster with one piece of its text replaced.
std::string with(const std::string& from, const std::string& to) {
  std::string j = test::round_cluster_json();
  const size_t at = j.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return j.replace(at, from.size(), to);
}

TEST(ClusterPresets, TheShippedOnesParseAndSayWhereTheirFiguresComeFrom) {
  std::vector<std::string> names;
  for (const auto& p : cluster_presets()) names.push_back(p.name);
  for (const char* want : {"a100-80gb-ib200", "h100-sxm-ib400", "h200-sxm-ib400", "local"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  for (const auto& n : names) {
    if (n == "local") continue;
    const Cluster c = load_cluster(n);
    EXPECT_EQ(c.name, n);
    EXPECT_EQ(c.gpus_per_node, 8);
    EXPECT_GT(c.device.peak_flops("bf16"), 100e12);
    for (const char* field : {"device.peak_tflops", "device.gemm.efficiency", "device.memory", "intra", "network"})
      EXPECT_TRUE(c.sources.count(field)) << n << " gives no source for " << field;
  }
  EXPECT_DOUBLE_EQ(load_cluster("a100-80gb-ib200").device.peak_flops("bf16"), 312e12);
  EXPECT_DOUBLE_EQ(load_cluster("h100-sxm-ib400").node_network_gb_s(), 8 * 50 * 0.85);
}

TEST(ClusterFile, ErrorsNameTheField) {
  EXPECT_NE(error_of(with("\"gpus_per_node\": 4", "\"gpus_per_node\": 0"))
                .find("bad.json: gpus_per_node: expected an integer >= 1, got 0"),
            std::string::npos);
  EXPECT_NE(error_of(with("\"memory_gb\": 80", "\"memory_gb\": -1")).find("device.memory_gb: expected a number > 0"),
            std::string::npos)
      << error_of(with("\"memory_gb\": 80", "\"memory_gb\": -1"));
  EXPECT_NE(error_of(with("\"efficiency\": 0.5", "\"efficiency\": 1.5")).find("device.gemm.efficiency"),
            std::string::npos);
  EXPECT_NE(error_of(with("\"kind\": \"nvswitch\"", "\"kind\": \"carrier pigeon\"")).find("intra.kind: expected one of"),
            std::string::npos);
  EXPECT_NE(error_of(with("\"nics_per_node\": 4", "\"nics_per_node\": \"four\"")).find("network.nics_per_node"),
            std::string::npos);
  EXPECT_NE(error_of(with("\"bf16\": 100", "\"bf17\": 100")).find("device.peak_tflops.bf17: unknown dtype"),
            std::string::npos);
  EXPECT_NE(error_of(with("\"name\": \"round\",", "")).find("name: missing"), std::string::npos);
  // A misspelt field is an error, not a silent default.
  EXPECT_NE(error_of(with("\"memory_efficiency\"", "\"memory_efficency\"")).find("device.memory_efficency: unknown field"),
            std::string::npos);
  EXPECT_NE(error_of("{\"name\": ").find("bad.json: not valid JSON"), std::string::npos);
  // Calibrated streaming kinds: only the kinds the model prices, each with samples.
  const std::string gelu = R"("stream_kernels": {"gelu.forward": {"samples": [{"bytes": 1e6, "gb_s": 2}]}}, "memory_gb")";
  EXPECT_EQ(error_of(with("\"memory_gb\"", gelu)), "(no error)");
  EXPECT_NE(error_of(with("\"memory_gb\"", R"("stream_kernels": {"gelo.forward": {"samples": []}}, "memory_gb")"))
                .find("device.stream_kernels.gelo.forward: unknown kernel kind (known: layer_norm.forward"),
            std::string::npos);
  EXPECT_EQ(error_of(with("\"memory_gb\"",
                          R"("stream_kernels": {"grad_norm": {"samples": [{"bytes": 1e6, "gb_s": 2}]}}, "memory_gb")")),
            "(no error)");  // the per-parameter kinds have no pass
  EXPECT_NE(error_of(with("\"memory_gb\"", R"("stream_kernels": {"grad_norm.forward": {"samples": []}}, "memory_gb")"))
                .find("unknown kernel kind"),
            std::string::npos);
  EXPECT_NE(error_of(with("\"memory_gb\"", R"("stream_kernels": {"gelu.forward": {"samples": []}}, "memory_gb")"))
                .find("device.stream_kernels.gelu.forward.samples: expected a non-empty array"),
            std::string::npos);
  EXPECT_NE(error_of(with("\"memory_gb\"",
                          R"("stream_kernels": {"rope.backward": {"samples": [{"bytes": 1e6, "gb_s": 0}]}}, "memory_gb")"))
                .find("device.stream_kernels.rope.backward.samples[0].gb_s: expected a number > 0"),
            std::string::npos);
}

TEST(ClusterFile, RoundTrip) {
  Cluster c = test::round_cluster();
  c.device.gemm.samples = {{64, 64, 64, "fp32", 1e10}};
  c.sources["device"] = "a test";
  c.device.stream_kernels["gelu.backward"].samples = {{1e6, 3}, {1e4, 2}};
  c.device.shared_efficiency = 0.75;
  c.device.oversubscribed_efficiency = 0.9;
  const Cluster back = parse_cluster(cluster_to_json(c), "round trip");
  EXPECT_DOUBLE_EQ(back.device.shared_efficiency, 0.75);
  EXPECT_DOUBLE_EQ(back.device.oversubscribed_efficiency, 0.9);
  ASSERT_EQ(back.device.stream_kernels.size(), 1u);
  const auto& gelu = back.device.stream_kernels.at("gelu.backward").samples;
  ASSERT_EQ(gelu.size(), 2u);
  EXPECT_DOUBLE_EQ(gelu[0].bytes, 1e4);  // sorted by size
  EXPECT_DOUBLE_EQ(gelu[0].gb_s, 2);
  EXPECT_DOUBLE_EQ(gelu[1].gb_s, 3);
  EXPECT_EQ(back.name, c.name);
  EXPECT_DOUBLE_EQ(back.device.peak_flops("bf16"), 100e12);
  ASSERT_EQ(back.device.gemm.samples.size(), 1u);
  EXPECT_DOUBLE_EQ(back.device.gemm.samples[0].flops, 1e10);
  EXPECT_DOUBLE_EQ(back.node_network_gb_s(), c.node_network_gb_s());
  EXPECT_EQ(back.sources.at("device"), "a test");
}

TEST(ClusterFile, UnknownNamesListThePresets) {
  try {
    load_cluster("no-such-cluster");
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(e.message().find("no such preset or file"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("h100-sxm-ib400"), std::string::npos) << e.message();
  }
}

// build/test_tmp/sim_cluster/<pid>, removed at exit when every test passed.
const qk::test::ScratchRoot kScratch("sim_cluster");

TEST(ClusterFile, LocalIsTheCalibrationFile) {
  const std::string dir = kScratch.fresh("local");
  const std::string path = dir + "/local.json";
  ::setenv("QK_SIM_CALIBRATION", path.c_str(), 1);
  try {
    load_cluster("local");
    ADD_FAILURE() << "no error without a calibration file";
  } catch (const ValueError& e) {
    EXPECT_NE(e.message().find("qk sim calibrate"), std::string::npos) << e.message();
  }
  atomic_write_file(path, test::round_cluster_json());
  EXPECT_EQ(load_cluster("local").name, "round");
  ::unsetenv("QK_SIM_CALIBRATION");
}

}  // namespace
}  // namespace qk::sim
