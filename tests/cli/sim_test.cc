// `qk sim` end to end: presets, one layout as text and JSON, the search,
// the trace, reliability, calibration, and clear errors for bad input.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "qk/base/file_io.h"
#include "run_qk.h"
#include "common/scratch_dir.h"

namespace qk::test {
namespace {

const ScratchRoot kScratch("sim");

// GPT-2 350M's shape on 16 A100s: tensor-parallel 2, data-parallel 8.
const std::string kModel =
    " --num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024"
    " --max-position-embeddings 1024 --vocab-size 50257 --bf16 --micro-batch-size 4 --global-batch-size 256";

TEST(QkSim, ListsThePresetsWithTheirSources) {
  const RunResult r = run_qk("sim --list-clusters");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* want : {"a100-80gb-ib200", "h100-sxm-ib400", "h200-sxm-ib400", "local", "device.gemm.efficiency",
                           "Maximum Achievable Matmul FLOPS"})
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
}

TEST(QkSim, OneLayoutAsTextAndJson) {
  const std::string flags = "sim --world-size 16 --cluster a100-80gb-ib200 --tensor-model-parallel-size 2" + kModel;
  const RunResult text = run_qk(flags);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  for (const char* want : {"layout      tp 2 pp 1 dp 8", "tokens/s", "MFU", "GB per GPU", "fits", "bubble"})
    EXPECT_NE(text.output.find(want), std::string::npos) << want << "\n" << text.output;
  const RunResult js = run_qk(flags + " --json");
  ASSERT_EQ(js.exit_code, 0) << js.output;
  const auto j = nlohmann::json::parse(js.output);
  for (const char* k : {"step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "mem_gb_per_gpu", "fits"})
    ASSERT_TRUE(j.contains(k)) << k << "\n" << js.output;
  EXPECT_GT(j["step_time_s"].get<double>(), 0);
  EXPECT_NEAR(j["tokens_per_s"].get<double>(), 256.0 * 1024 / j["step_time_s"].get<double>(), 1e-6 * 256 * 1024);
  EXPECT_GT(j["mfu"].get<double>(), 0.05);
  EXPECT_LT(j["mfu"].get<double>(), 0.87);
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_EQ(j["layout"]["dp"].get<int>(), 8);
}

TEST(QkSim, SearchPrintsOneJsonObjectPerLayoutFastestFirst) {
  const RunResult r = run_qk("sim --world-size 16 --cluster h100-sxm-ib400 --search --top 5 --json" + kModel);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  std::string line;
  double last = 1e300;
  int n = 0;
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_TRUE(j["fits"].get<bool>());
    EXPECT_LE(j["tokens_per_s"].get<double>(), last);
    last = j["tokens_per_s"].get<double>();
    ++n;
  }
  EXPECT_EQ(n, 5);
  const RunResult text = run_qk("sim --world-size 16 --cluster h100-sxm-ib400 --search --top 3" + kModel);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("searched "), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("best: --tensor-model-parallel-size"), std::string::npos) << text.output;
}

TEST(QkSim, WritesTheSimulatedStepAsAChromeTrace) {
  const std::string dir = kScratch.fresh("trace");
  const RunResult r = run_qk("sim --world-size 16 --cluster a100-80gb-ib200 --pipeline-model-parallel-size 4"
                             " --trace " + dir + "/step.json" + kModel);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(read_file(dir + "/step.json"));
  ASSERT_TRUE(j.contains("traceEvents"));
  int forwards = 0;
  for (const auto& e : j["traceEvents"])
    if (e.value("cat", "") == "forward") ++forwards;
  EXPECT_EQ(forwards, 4 * 16);  // 4 stages x 16 micro-batches (256 / (4 x dp 4))
}

TEST(QkSim, GoodputUnderFailures) {
  const RunResult r = run_qk("sim --world-size 1024 --cluster h100-sxm-ib400 --tensor-model-parallel-size 8"
                             " --node-mtbf-hours 1280 --checkpoint-write-s 50 --restart-s 0" + kModel +
                             " --global-batch-size 512");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("system MTBF 10.00 h (2.4 failures a day)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("goodput 94.8%"), std::string::npos) << r.output;
}

TEST(QkSim, CalibrateWritesAClusterTheSimulatorReads) {
  const std::string dir = kScratch.fresh("calibrate");
  const RunResult cal = run_qk("sim calibrate --quick --output " + dir + "/local.json");
  ASSERT_EQ(cal.exit_code, 0) << cal.output;
  EXPECT_NE(cal.output.find("gemm "), std::string::npos) << cal.output;
  EXPECT_NE(cal.output.find("gelu: forward "), std::string::npos) << cal.output;
  // Ranks sharing the host: measured with forked ranks where there are cores
  // for two; twice as many ranks as cores wherever the host is not big.
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores >= 2) {
    EXPECT_NE(cal.output.find(fmt::format("{} ranks at once on {} cores: a small layer's step", cores, cores)),
              std::string::npos)
        << cal.output;
  }
  if (cores <= 64) {
    EXPECT_NE(cal.output.find(fmt::format("{} ranks at once on {} cores: a small layer's step", 2 * cores, cores)),
              std::string::npos)
        << cal.output;
  }
  // Each GEMM in the three layouts of a linear layer's forward and backward.
  EXPECT_NE(cal.output.find("gemm 256x256x256 fp32: "), std::string::npos) << cal.output;
  EXPECT_NE(cal.output.find(" GFLOP/s (x w^T "), std::string::npos) << cal.output;
  // Every streaming kind the model prices, both passes, and the two per-parameter kinds, measured at each size.
  const nlohmann::json file = nlohmann::json::parse(read_file(dir + "/local.json"));
  const nlohmann::json& kinds = file["device"]["stream_kernels"];
  EXPECT_EQ(kinds.size(), 2 * 13u + 2u) << kinds.dump();
  for (const char* k : {"layer_norm.forward", "softmax.backward", "cross_entropy.forward", "embedding.backward",
                        "moe_dispatch.forward", "linear.backward", "grad_accumulate", "grad_norm"}) {
    ASSERT_TRUE(kinds.contains(k)) << k;
    EXPECT_EQ(kinds[k]["samples"].size(), 2u) << k;
    for (const auto& sample : kinds[k]["samples"]) EXPECT_GT(sample["gb_s"].get<double>(), 0) << k;
  }
  const RunResult r =
      run_qk("sim --world-size 2 --cluster " + dir + "/local.json --json" + kModel, "QK_SIM_CALIBRATION=/nowhere");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(nlohmann::json::parse(r.output)["step_time_s"].get<double>(), 0);
  const RunResult local = run_qk("sim --world-size 2 --cluster local" + kModel, "QK_SIM_CALIBRATION=" + dir + "/local.json");
  EXPECT_EQ(local.exit_code, 0) << local.output;
}

TEST(QkSim, BadInputSaysWhatIsWrong) {
  RunResult r = run_qk("sim --world-size 16 --cluster no-such-cluster" + kModel);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--cluster no-such-cluster: no such preset or file; the presets are a100-80gb-ib200"),
            std::string::npos)
      << r.output;

  const std::string dir = kScratch.fresh("bad");
  std::ofstream(dir + "/c.json") << R"({"name": "x", "gpus_per_node": 8, "device": {"model": "m",
    "peak_tflops": {"bf16": 100}, "gemm": {}, "memory_gb": 80, "memory_bandwidth_gb_s": 0},
    "intra": {"kind": "nvlink", "bandwidth_gb_s": 100, "latency_us": 1},
    "network": {"nic": {"kind": "roce", "bandwidth_gb_s": 50, "latency_us": 5}, "nics_per_node": 8}})";
  r = run_qk("sim --world-size 16 --cluster " + dir + "/c.json" + kModel);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("device.memory_bandwidth_gb_s: expected a number > 0, got 0"), std::string::npos)
      << r.output;

  r = run_qk("sim --world-size 12 --cluster h100-sxm-ib400 --tensor-model-parallel-size 8" + kModel);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("world size (12) is not divisible by --tensor-model-parallel-size (8)"), std::string::npos)
      << r.output;

  r = run_qk("sim --cluster h100-sxm-ib400" + kModel);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("qk sim needs --world-size"), std::string::npos) << r.output;

  r = run_qk("sim --world-size 16 --cluster h100-sxm-ib400 --num-layerz 3" + kModel);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--num-layers"), std::string::npos) << r.output;  // the closest known flag
}

}  // namespace
}  // namespace qk::test
