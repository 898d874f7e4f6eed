#include "qk/data/gpt_dataset.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>

#include "common/reference_tool.h"
#include "numpy_random.h"
#include "data/test_util.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"

namespace {
using json = nlohmann::json;
using qk::test::TempDir;

bool have_numpy() {
  return qk::file_exists("/usr/bin/python3") &&
         std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  ::pclose(f);
  return out;
}

TEST(NumpyRandomState, ShuffleMatchesNumpy) {
  if (!have_numpy()) QK_MISSING_REFERENCE_TOOL("/usr/bin/python3 with numpy (Debian: python3-numpy)");
  const std::string py =
      "import numpy as np\n"
      "rs = np.random.RandomState(1234)\n"
      "a = np.arange(1000, dtype=np.int32); rs.shuffle(a)\n"
      "b = np.arange(70000, dtype=np.int64); rs.shuffle(b)\n"
      "c = np.arange(3, dtype=np.uint32); rs.shuffle(c)\n"
      "print(' '.join(map(str, list(a) + list(b) + list(c))))\n";
  qk::test::TempDir dir("np_shuffle");
  qk::atomic_write_file(dir / "s.py", py);
  const std::string out = run("/usr/bin/python3 '" + (dir / "s.py") + "'");
  std::vector<int64_t> want;
  for (size_t p = 0; p < out.size();) {
    char* e;
    want.push_back(std::strtoll(out.c_str() + p, &e, 10));
    p = static_cast<size_t>(e - out.c_str());
    while (p < out.size() && (out[p] == ' ' || out[p] == '\n')) ++p;
  }
  qk::data::NumpyRandomState rs(1234);
  std::vector<int32_t> a(1000);
  std::iota(a.begin(), a.end(), 0);
  rs.shuffle(std::span<int32_t>(a));
  std::vector<int64_t> b(70000), c(3);
  std::iota(b.begin(), b.end(), 0);
  std::iota(c.begin(), c.end(), 0);
  rs.shuffle(std::span<int64_t>(b));
  rs.shuffle(std::span<int64_t>(c));
  std::vector<int64_t> got(a.begin(), a.end());
  got.insert(got.end(), b.begin(), b.end());
  got.insert(got.end(), c.begin(), c.end());
  EXPECT_EQ(got, want);
}

TEST(GptSplit, BoundsFollowMegatron) {
  EXPECT_EQ(qk::data::split_bounds("969,30,1", 9), (std::vector<int64_t>{0, 9, 9, 9}));
  EXPECT_EQ(qk::data::split_bounds("969,30,1", 10000), (std::vector<int64_t>{0, 9690, 9990, 10000}));
  EXPECT_EQ(qk::data::split_bounds("98,2", 100), (std::vector<int64_t>{0, 98, 100, 100}));
  // Python's round() ties to even: 2.5 -> 2 twice gives [0, 2, 4, 4], then
  // shifted by the shortfall of 1: [0, 3, 5, 5].
  EXPECT_EQ(qk::data::split_bounds("1,1", 5), (std::vector<int64_t>{0, 3, 5, 5}));
  EXPECT_THROW(qk::data::split_bounds("1,2,3,4", 10), qk::ValueError);
  EXPECT_THROW(qk::data::split_bounds("0,0", 10), qk::ValueError);
}

struct Case;
std::string fmt_cmd(const std::string& prefix, const Case& c);

struct Case {
  int64_t seq_length, num_samples;
  uint32_t seed;
  const char* split;
  const char* split_name;
};

std::string fmt_cmd(const std::string& prefix, const Case& c) {
  return "/usr/bin/python3 '" QK_SOURCE_DIR "/tests/data/scripts/megatron_gpt_indices.py' '" + prefix +
         "' " + std::to_string(c.seq_length) + " " + std::to_string(c.num_samples) + " " +
         std::to_string(c.seed) + " " + c.split + " " + c.split_name;
}

class GptDatasetVsMegatronPython : public ::testing::TestWithParam<Case> {};

TEST_P(GptDatasetVsMegatronPython, SameIndicesAndSamples) {
  if (!have_numpy()) QK_MISSING_REFERENCE_TOOL("/usr/bin/python3 with numpy (Debian: python3-numpy)");
  const std::string prefix = qk::test::megatron_fixture("megatron_u16_text_document");
  if (!qk::file_exists(prefix + ".idx")) GTEST_SKIP() << "Megatron fixtures not found";
  const Case c = GetParam();
  const std::string out = run(fmt_cmd(prefix, c));
  json want = json::parse(out);
  TempDir dir("gpt_vs_py");
  qk::data::IndexedDataset ds(prefix);
  qk::data::GptDatasetOptions o;
  o.sequence_length = c.seq_length;
  o.num_samples = c.num_samples;
  o.seed = c.seed;
  o.split = c.split;
  o.split_name = qk::data::parse_split_name(c.split_name);
  o.cache_dir = dir / "cache";
  for (int pass = 0; pass < 2; ++pass) {  // built, then loaded from the cache
    qk::data::GptDataset g(ds, o);
    EXPECT_EQ(g.loaded_from_cache(), pass == 1);
    EXPECT_EQ(g.num_epochs(), want["num_epochs"].get<int64_t>());
    EXPECT_EQ(g.document_index(), want["document_index"].get<std::vector<int32_t>>());
    std::vector<int64_t> flat;
    for (const auto& p : want["sample_index"]) {
      flat.push_back(p[0].get<int64_t>());
      flat.push_back(p[1].get<int64_t>());
    }
    EXPECT_EQ(g.sample_index(), flat);
    EXPECT_EQ(g.shuffle_index(), want["shuffle_index"].get<std::vector<int64_t>>());
    ASSERT_EQ(g.size(), want["samples"].size());
    EXPECT_GE(g.size(), static_cast<size_t>(c.num_samples));
    for (size_t i = 0; i < g.size(); ++i) {
      EXPECT_EQ(g.sample(i), want["samples"][i].get<std::vector<int64_t>>()) << "sample " << i;
      EXPECT_EQ(g.sample(i).size(), static_cast<size_t>(c.seq_length + 1));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Gpt, GptDatasetVsMegatronPython,
    ::testing::Values(Case{16, 10, 1234, "969,30,1", "train"},     // one epoch
                      Case{16, 60, 1234, "969,30,1", "train"},     // several epochs
                      Case{32, 14, 7, "969,30,1", "train"},        // final epoch separated
                      Case{8, 20, 99, "6,2,2", "valid"},
                      Case{4, 5, 3, "6,2,2", "test"}));

}  // namespace

namespace {

TEST(Blending, IndicesFollowMegatronsGreedyRule) {
  std::vector<int16_t> di;
  std::vector<int64_t> dsi;
  qk::data::build_blending_indices({0.3, 0.7}, 10, di, dsi);
  // Sample s goes to the dataset whose weight * max(s, 1) - taken is largest.
  EXPECT_EQ(di, (std::vector<int16_t>{1, 0, 1, 1, 0, 1, 1, 0, 1, 1}));
  EXPECT_EQ(dsi, (std::vector<int64_t>{0, 0, 1, 2, 1, 3, 4, 2, 5, 6}));
}

TEST(Blending, DataPathParsesWeightsAndPrefixes) {
  auto e = qk::data::parse_data_path("30 a_text_document 70 /x/b_text_document");
  ASSERT_EQ(e.size(), 2u);
  EXPECT_DOUBLE_EQ(e[0].weight, 0.3);
  EXPECT_EQ(e[1].prefix, "/x/b_text_document");
  EXPECT_EQ(qk::data::parse_data_path("only_text_document")[0].weight, 1.0);
  EXPECT_THROW(qk::data::parse_data_path("0.5 a 0.5"), qk::ValueError);
  EXPECT_THROW(qk::data::parse_data_path("x a y b"), qk::ValueError);
}

TEST(Blending, BlendedSamplesComeFromTheChosenDatasets) {
  const std::string u16 = qk::test::megatron_fixture("megatron_u16_text_document");
  const std::string i32 = qk::test::megatron_fixture("megatron_i32_text_document");
  if (!qk::file_exists(u16 + ".idx")) GTEST_SKIP() << "Megatron fixtures not found";
  TempDir dir("blend");
  qk::data::GptDatasetOptions o;
  o.sequence_length = 8;
  o.num_samples = 20;
  o.split = "1";
  o.cache_dir = dir / "cache";
  qk::data::BlendedGptDataset b({{0.25, u16}, {0.75, i32}}, o);
  EXPECT_EQ(b.size(), 20u);
  for (size_t i = 0; i < b.size(); ++i) {
    const auto& d = b.dataset(static_cast<size_t>(b.dataset_index()[i]));
    EXPECT_EQ(b.sample(i), d.sample(static_cast<size_t>(b.dataset_sample_index()[i])));
  }
}

TEST(GptDataset, DamagedCacheIsRebuilt) {
  const std::string u16 = qk::test::megatron_fixture("megatron_u16_text_document");
  if (!qk::file_exists(u16 + ".idx")) GTEST_SKIP() << "Megatron fixtures not found";
  TempDir dir("gpt_cache");
  qk::data::IndexedDataset ds(u16);
  qk::data::GptDatasetOptions o;
  o.sequence_length = 16;
  o.num_samples = 30;
  o.cache_dir = dir / "cache";
  std::vector<int64_t> first;
  std::string base;
  {
    qk::data::GptDataset g(ds, o);
    first = g.shuffle_index();
    base = g.cache_base();
  }
  qk::atomic_write_file(base + "shuffle_index.npy", "garbage");
  qk::data::GptDataset g(ds, o);
  EXPECT_FALSE(g.loaded_from_cache());
  EXPECT_EQ(g.shuffle_index(), first);
  o.seed = 5;  // other parameters: another cache entry
  qk::data::GptDataset h(ds, o);
  EXPECT_FALSE(h.loaded_from_cache());
  EXPECT_NE(h.cache_base(), base);
}

}  // namespace

namespace {

// A dataset of `docs` documents of 20 + d tokens each, written under `dir`.
std::string write_dataset(const TempDir& dir, const std::string& name, int docs) {
  const std::string prefix = dir / name;
  qk::data::IndexedDatasetBuilder b(qk::data::bin_path(prefix), qk::data::DType::kUint16);
  for (int d = 0; d < docs; ++d) {
    std::vector<int32_t> doc(static_cast<size_t>(20 + d), d + 1);
    b.add_document(doc, std::vector<int32_t>{static_cast<int32_t>(doc.size())});
  }
  b.finalize(qk::data::idx_path(prefix));
  return prefix;
}

// Megatron-Core's builder: weighted blends plan ceil(N * w) samples from each
// dataset, build 0.5% more, and blend sum(ceil(N * w)) samples; bare prefixes
// blend one epoch of each by their sizes.
TEST(Blending, SizesFollowMegatronsBuilder) {
  TempDir dir("blend_sizes");
  const std::string a = write_dataset(dir, "a_text_document", 10), b_ = write_dataset(dir, "b_text_document", 30);
  qk::data::GptDatasetOptions o;
  o.sequence_length = 8;
  o.num_samples = 21;
  o.split = "1";
  o.cache_dir = dir / "cache";
  qk::data::BlendedGptDataset b({{0.3, a}, {0.7, b_}}, o);
  // ceil(21 * 0.3) = 7, ceil(21 * 0.7) = 15: 22 samples.
  EXPECT_EQ(b.size(), 22u);
  EXPECT_GE(b.dataset(0).size(), 8u);  // ceil(7 * 1.005)
  EXPECT_GE(b.dataset(1).size(), 16u);
  int from0 = 0;
  for (int16_t d : b.dataset_index()) from0 += d == 0;
  EXPECT_EQ(from0, 7);
  for (size_t i = 0; i < b.size(); ++i)
    EXPECT_EQ(b.sample(i), b.dataset(static_cast<size_t>(b.dataset_index()[i]))
                               .sample(static_cast<size_t>(b.dataset_sample_index()[i])));

  auto by_size = qk::data::BlendedGptDataset::by_size({a, b_}, o);
  const double n0 = static_cast<double>(by_size->dataset(0).size()), n1 = static_cast<double>(by_size->dataset(1).size());
  EXPECT_NEAR(by_size->weights()[0], n0 / (n0 + n1), 1e-12);
  EXPECT_EQ(by_size->size(), std::min<size_t>(21, static_cast<size_t>(n0 + n1)));
}

TEST(GptDataset, ZeroSamplesMeansOneEpoch) {
  TempDir dir("one_epoch");
  qk::data::IndexedDataset ds(write_dataset(dir, "c_text_document", 12));
  qk::data::GptDatasetOptions o;
  o.sequence_length = 8;
  o.num_samples = 0;
  o.split = "1";
  o.cache_dir = dir / "cache";
  qk::data::GptDataset g(ds, o);
  EXPECT_EQ(g.num_epochs(), 1);
  EXPECT_EQ(static_cast<int64_t>(g.size()), (ds.num_tokens() - 1) / 8);
}

}  // namespace
