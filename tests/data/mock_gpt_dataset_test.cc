// --mock-data: numpy's default_rng reproduced bit for bit (against values
// numpy wrote, tests/fixtures/gen_mock_gpt.py), Megatron's mock sequences,
// and GPT samples drawn from them.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "numpy_pcg64.h"
#include "qk/base/error.h"
#include "qk/data/gpt_dataset.h"
#include "qk/data/mock_gpt_dataset.h"

namespace {

nlohmann::json fixture() {
  std::ifstream in(std::string(QK_SOURCE_DIR) + "/tests/fixtures/numpy/mock_gpt_lengths.json");
  EXPECT_TRUE(in.good()) << "run tests/fixtures/gen_mock_gpt.py";
  return nlohmann::json::parse(in);
}

TEST(NumpyPcg64, IntegersEqualNumpysDefaultRng) {
  for (const auto& o : fixture()["others"]) {
    qk::data::NumpyPcg64 rng(o["seed"].get<uint64_t>());
    std::vector<int32_t> got;
    for (size_t i = 0; i < o["values"].size(); ++i) got.push_back(rng.integer(o["low"], o["high"]));
    EXPECT_EQ(got, o["values"].get<std::vector<int32_t>>()) << "seed " << o["seed"];
  }
}

TEST(MockGptSequences, LengthsAreMegatronsMockLengths) {
  const auto f = fixture();
  qk::data::MockGptSequences mock(/*eod=*/4096);
  ASSERT_EQ(mock.num_sequences(), 100000u);
  const auto first = f["first"].get<std::vector<int32_t>>(), last = f["last"].get<std::vector<int32_t>>();
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(mock.sequence_length(i), first[i]) << i;
  for (size_t i = 0; i < last.size(); ++i) EXPECT_EQ(mock.sequence_length(100000 - 16 + i), last[i]) << i;
  EXPECT_EQ(mock.num_tokens(), f["sum"].get<int64_t>());
}

TEST(MockGptSequences, SequenceIsCountingThenEod) {
  qk::data::MockGptSequences mock(/*eod=*/9999);
  const size_t i = 7;  // length 68
  ASSERT_EQ(mock.sequence_length(i), 68);
  const auto all = mock.get(i, 0, std::nullopt);
  ASSERT_EQ(all.size(), 68u);
  EXPECT_EQ(all[0], 1);
  EXPECT_EQ(all[66], 67);
  EXPECT_EQ(all[67], 9999);
  // numpy slicing: offset and length, clamped at the end.
  EXPECT_EQ(mock.get(i, 65, 2), (std::vector<int64_t>{66, 67}));
  EXPECT_EQ(mock.get(i, 66, 10), (std::vector<int64_t>{67, 9999}));
  EXPECT_TRUE(mock.get(i, 80, 3).empty());
  EXPECT_THROW(mock.sequence_length(100000), qk::IndexError);
}

TEST(MockGptSequences, GptSamplesAreWindowsOfTheMockSequences) {
  qk::data::MockGptSequences mock(/*eod=*/5000);
  qk::data::GptDatasetOptions o;
  o.sequence_length = 64;
  o.num_samples = 50;
  o.split = "1,1,1";
  o.cache_dir = "-";
  qk::data::GptDataset train(mock, o);
  ASSERT_GE(train.size(), 50u);
  for (size_t k = 0; k < 20; ++k) {
    const auto s = train.sample(k);
    ASSERT_EQ(s.size(), 65u);
    // Within a mock sequence each token is the previous + 1; a new one restarts at 1 after eod.
    for (size_t t = 1; t < s.size(); ++t)
      EXPECT_TRUE(s[t] == s[t - 1] + 1 || s[t] == 5000 || (s[t - 1] == 5000 && s[t] == 1))
          << "sample " << k << " at " << t << ": " << s[t - 1] << " then " << s[t];
  }
  // The split's documents are the first third of the sequences.
  EXPECT_EQ(train.split_begin(), 0);
  EXPECT_EQ(train.split_end(), qk::data::split_bounds("1,1,1", 100000)[1]);
  EXPECT_NEAR(static_cast<double>(train.split_end()), 100000.0 / 3, 1.0);
}

}  // namespace
