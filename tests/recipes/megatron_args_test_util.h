// Helpers of the Megatron argument tests: a valid practice command line, the seed
// fixture's arrays with the practice sizes substituted, and error matchers.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/argv.h"
#include "qk/base/error.h"
#include "qk/recipes/megatron_args.h"

namespace qk::test {

// The seed's practice exercise: 6 layers, hidden 512, 8 heads, Llama layout.
inline Argv practice_model() {
  return {"--num-layers", "6", "--hidden-size", "512", "--num-attention-heads", "8", "--seq-length", "1024",
          "--max-position-embeddings", "1024", "--position-embedding-type", "rope", "--normalization", "RMSNorm",
          "--swiglu", "--disable-bias-linear"};
}
inline Argv practice_training() {
  return {"--micro-batch-size", "4", "--global-batch-size", "16", "--train-iters", "100", "--lr", "3e-4",
          "--mock-data"};
}
inline Argv practice() { return practice_model() + practice_training(); }

inline recipes::MegatronArgsOptions options(int64_t world_size = 1) {
  recipes::MegatronArgsOptions o;
  o.world_size = world_size;
  o.check_data_files = false;
  return o;
}

// The message of the ValueError/IoError `f` throws ("" if it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const qk::Error& e) {
    return e.message();
  }
  return "";
}
inline std::string parse_error(const Argv& argv, int64_t world_size = 1) {
  return error_of([&] { recipes::parse_megatron_args(argv, options(world_size)); });
}

// Expects parse_megatron_args(argv) to fail with a message containing `needle`.
inline void expect_parse_error(const Argv& argv, const std::string& needle, int64_t world_size = 1) {
  const std::string msg = parse_error(argv, world_size);
  EXPECT_TRUE(!msg.empty() && msg.find(needle) != std::string::npos)
      << "expected an error containing: " << needle << "\n got: " << (msg.empty() ? "no error" : msg);
}
// (A macro, so a failure points at the caller's line.)
#define QK_EXPECT_PARSE_ERROR(...)              \
  do {                                          \
    SCOPED_TRACE("QK_EXPECT_PARSE_ERROR");      \
    ::qk::test::expect_parse_error(__VA_ARGS__); \
  } while (0)

// The fixture written by tests/fixtures/megatron_args/extract_seed_flags.py.
struct SeedFlags {
  std::vector<std::string> order;                           // array names as in the seed
  std::map<std::string, std::vector<std::string>> arrays;   // name -> lines
};
inline SeedFlags load_seed_flags() {
  const std::string path = std::string(QK_SOURCE_DIR) + "/tests/fixtures/megatron_args/seed_002_flags.txt";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  SeedFlags s;
  std::string current;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (line.front() == '[' && line.back() == ']') {
      current = line.substr(1, line.size() - 2);
      s.order.push_back(current);
      continue;
    }
    s.arrays[current].push_back(line);
  }
  return s;
}

// The practice sizes for the seed's $VARIABLES.
inline const std::map<std::string, std::string>& practice_values() {
  static const std::map<std::string, std::string> v = {
      {"NUM_LAYERS", "6"}, {"HIDDEN_SIZE", "512"}, {"SEQ_LENGTH", "1024"}, {"MAX_POSITION_EMBEDDINGS", "1024"},
      {"VOCAB_SIZE", "50257"}, {"FFN_HIDDEN_SIZE", "1408"}, {"MICRO_BS", "4"}, {"GLOBAL_BS", "16"},
      {"TRAIN_STEPS", "100"}, {"RECOMPUTE_LAYERS", "1"}, {"NUM_EXPERTS", "4"}, {"EP_SIZE", "2"},
      {"MOE_ROUTER_GROUP_TOPK", "1"}, {"MOE_TOP_K", "2"}, {"MOE_ROUTER_TOPK_SCALING_FACTOR", "1.0"},
      {"MOE_EXPERT_CAPACITY_FACTOR", "1.0"}, {"MOE_FFN_HIDDEN_SIZE", "704"},
      {"MOE_SHARED_EXPERT_INTERMEDIATE_SIZE", "704"}, {"MOE_LAYER_FREQ", "([0]*1+[1]*5)"}};
  return v;
}
// Values the seed's prose leaves out (flags listed without one).
inline const std::map<std::string, std::string>& practice_missing_values() {
  static const std::map<std::string, std::string> v = {{"--lr-warmup-iters", "10"},
                                                       {"--tensor-model-parallel-size", "1"},
                                                       {"--pipeline-model-parallel-size", "1"}};
  return v;
}

// One fixture line as bash would pass it: words, quotes removed, $VARS substituted,
// and a practice value after a flag the seed's prose gives none.
inline Argv expand_line(const std::string& line) {
  Argv out;
  std::istringstream in(line);
  for (std::string w; in >> w;) {
    std::erase(w, '"');
    if (!w.empty() && w[0] == '$') {
      const auto it = practice_values().find(w.substr(1));
      EXPECT_NE(it, practice_values().end()) << "no practice value for " << w;
      if (it != practice_values().end()) w = it->second;
    }
    out.push_back(w);
  }
  if (out.size() == 1)
    if (const auto it = practice_missing_values().find(out[0]); it != practice_missing_values().end())
      out.push_back(it->second);
  return out;
}
inline Argv expand_array(const std::vector<std::string>& lines) {
  Argv out;
  for (const auto& l : lines) out = out + expand_line(l);
  return out;
}

}  // namespace qk::test
