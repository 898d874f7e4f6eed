// What the multi-rank `qk pretrain-gpt` tests share: running one rank or N
// ranks under `qk run`, reading metrics.jsonl, and comparing two runs' losses
// and final checkpoints (tolerances: f32 layouts that sum the same products
// in another order; each test file states what it measured).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/run_qk.h"
#include "common/argv.h"
#include "qk/nn/safetensors.h"

namespace qk::test {

inline RunResult pretrain_one_rank(const Argv& args) {
  return run_qk("pretrain-gpt" + shell_words(args), "QK_NUM_THREADS=1");
}
inline RunResult pretrain_ranks(int n, const Argv& args, const std::string& env = "") {
  return run_qk("run --nproc-per-node " + std::to_string(n) + " -- '" + QK_BIN + "' pretrain-gpt" + shell_words(args),
                env);
}

// iteration -> record of that kind in DIR/metrics.jsonl (the newest wins).
inline std::map<int64_t, nlohmann::json> metrics(const std::string& dir, const std::string& kind) {
  std::map<int64_t, nlohmann::json> out;
  std::ifstream in(dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["kind"] == kind) out[j["iteration"].get<int64_t>()] = j;
  }
  return out;
}

// lm loss within a relative 1e-5 and the grad norm within 1e-4 at iterations from..to.
inline void expect_same_losses(const std::string& ref, const std::string& got, int64_t from, int64_t to) {
  const auto a = metrics(ref, "train"), b = metrics(got, "train");
  for (int64_t i = from; i <= to; ++i) {
    ASSERT_TRUE(a.count(i) && b.count(i)) << "iteration " << i << " missing in " << ref << " or " << got;
    const double x = a.at(i)["lm loss"], y = b.at(i)["lm loss"];
    EXPECT_NEAR(y, x, 1e-5 * std::abs(x)) << "lm loss at iteration " << i;
    const double gx = a.at(i)["grad_norm"], gy = b.at(i)["grad_norm"];
    EXPECT_NEAR(gy, gx, 1e-4 * gx) << "grad norm at iteration " << i;
  }
}

// Two checkpoint files hold the same f32 tensors by name: each within a
// relative 1e-4 (L2) and 3e-4 absolute per entry.
inline void expect_close_tensors(const std::string& ref_file, const std::string& got_file) {
  const nn::SafetensorsFile a = nn::load_safetensors(ref_file), b = nn::load_safetensors(got_file);
  ASSERT_EQ(a.tensors.size(), b.tensors.size()) << got_file;
  for (const auto& [name, t] : a.tensors) {
    ASSERT_TRUE(b.tensors.count(name)) << name << " missing in " << got_file;
    const Tensor& u = b.tensors.at(name);
    ASSERT_EQ(t.shape(), u.shape()) << name;
    const float* x = t.data_ptr<float>();
    const float* y = u.data_ptr<float>();
    double diff2 = 0, norm2 = 0, max_abs = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double d = static_cast<double>(x[i]) - y[i];
      diff2 += d * d;
      norm2 += static_cast<double>(x[i]) * x[i];
      max_abs = std::max(max_abs, std::abs(d));
    }
    EXPECT_LE(std::sqrt(diff2 / std::max(norm2, 1e-30)), 1e-4) << name;
    EXPECT_LE(max_abs, 3e-4) << name;
  }
}

}  // namespace qk::test
