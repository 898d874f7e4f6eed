// --data-path blends: Megatron's get_blend_from_list forms, normalised weights, and
// the .bin/.idx of every prefix opened with clear errors.
#include <gtest/gtest.h>

#include <fstream>

#include "data/test_util.h"
#include "megatron_args_test_util.h"
#include "qk/data/indexed_dataset.h"

namespace qk::test {
namespace {

using recipes::parse_data_blend;

std::string write_dataset(const TempDir& dir, const std::string& name, int documents) {
  const std::string prefix = dir / name;
  data::IndexedDatasetBuilder b(data::bin_path(prefix), data::DType::kUint16);
  for (int d = 0; d < documents; ++d) {
    std::vector<int32_t> doc(5, d);
    b.add_document(doc, std::vector<int32_t>{5});
  }
  b.finalize(data::idx_path(prefix));
  return prefix;
}

TEST(MegatronDataBlend, MegatronsThreeForms) {
  // Weight/prefix pairs; token counts (the seed's DATA_PATH) are weights too.
  auto b = parse_data_blend({"30", "a", "70", "b"});
  EXPECT_EQ(b.prefixes, (Argv{"a", "b"}));
  EXPECT_EQ(b.weights, (std::vector<double>{0.3, 0.7}));
  b = parse_data_blend({"\n234215 /d/x_document\n74019  /d/y_document\n"});
  EXPECT_EQ(b.prefixes, (Argv{"/d/x_document", "/d/y_document"}));
  EXPECT_DOUBLE_EQ(b.weights[0], 234215.0 / (234215.0 + 74019.0));
  // A single prefix, or prefixes only: Megatron infers weights from the datasets' sizes.
  b = parse_data_blend({"a_document"});
  EXPECT_EQ(b.prefixes, Argv{"a_document"});
  EXPECT_TRUE(b.weights.empty());
  b = parse_data_blend({"a_document", "b_document"});
  EXPECT_EQ(b.prefixes.size(), 2u);
  EXPECT_TRUE(b.weights.empty());
}

TEST(MegatronDataBlend, MalformedBlendsNameTheFlagAndTheWord) {
  const auto err = [](const Argv& w, const std::string& flag = "--data-path") {
    return error_of([&] { parse_data_blend(w, flag); });
  };
  EXPECT_EQ(err({}), "--data-path was given no prefixes; give PREFIX, W1 PREFIX1 W2 PREFIX2 ..., or PREFIX1 "
                     "PREFIX2 ...");
  EXPECT_EQ(err({"0.5", "a", "0.5"}),
            "--data-path: 3 words, starting with the weight '0.5'; weights and prefixes must pair up (W1 PREFIX1 "
            "W2 PREFIX2 ...)");
  EXPECT_EQ(err({"0.5", "a", "b", "c"}, "--train-data-path"),
            "--train-data-path: 'b' (word 3) is not a weight, but other weight positions hold numbers; give W1 "
            "PREFIX1 W2 PREFIX2 ... or prefixes only");
  EXPECT_EQ(err({"-1", "a", "2", "b"}), "--data-path: the weight of 'a' must be a finite number >= 0, got '-1'");
  EXPECT_EQ(err({"0", "a", "0", "b"}), "--data-path: the weights sum to 0");
}

TEST(MegatronDataBlend, FilesAreOpenedAndCounted) {
  TempDir dir("megatron_blend_files");
  const std::string a = write_dataset(dir, "a_text_document", 4);
  const std::string b = write_dataset(dir, "b_text_document", 9);
  auto blend = parse_data_blend({"1", a, "3", b});
  recipes::check_data_blend_files(blend);
  EXPECT_EQ(blend.num_sequences, (std::vector<int64_t>{4, 9}));
  EXPECT_EQ(blend.num_tokens, (std::vector<int64_t>{20, 45}));
  EXPECT_EQ(blend.weights, (std::vector<double>{0.25, 0.75}));
  // Through the parser, with the files checked.
  recipes::MegatronArgsOptions o;
  const auto p = recipes::parse_megatron_args(practice_model() + Argv{"--micro-batch-size", "1", "--train-iters", "4",
                                                                    "--lr", "1e-3", "--data-path", a, b},
                                            o);
  ASSERT_TRUE(p.data_blend.has_value());
  EXPECT_EQ(p.data_blend->num_sequences, (std::vector<int64_t>{4, 9}));
}

TEST(MegatronDataBlend, MissingOrCorruptFilesAreClearErrors) {
  TempDir dir("megatron_blend_errors");
  const std::string a = write_dataset(dir, "a_text_document", 2);
  const auto check = [](const Argv& words, const std::string& flag = "--data-path") {
    return error_of([&] {
      auto blend = parse_data_blend(words, flag);
      recipes::check_data_blend_files(blend, flag);
    });
  };
  const std::string missing = dir / "nope_text_document";
  EXPECT_EQ(check({"0.5", a, "0.5", missing}),
            "--data-path: dataset 2 of 2, prefix '" + missing + "': " + missing +
                ".idx does not exist (a prefix names PREFIX.bin and PREFIX.idx, as qk preprocess writes them)");
  EXPECT_EQ(check({a + ".bin"}, "--train-data-path"),
            "--train-data-path: dataset 1 of 1, prefix '" + a + ".bin': " + a + ".bin.idx does not exist (give "
            "the prefix without .bin/.idx)");
  // A corrupt .idx: the error names the flag, the prefix, and what the reader found wrong.
  const std::string bad = dir / "bad_text_document";
  { std::ofstream(bad + ".idx") << "not an index"; }
  { std::ofstream(bad + ".bin") << "xx"; }
  const std::string err = check({bad});
  EXPECT_EQ(err.find("--data-path: dataset 1 of 1, prefix '" + bad + "': "), 0u) << err;
  EXPECT_NE(err.find(".idx"), std::string::npos) << err;
  // A dataset without tokens cannot be sampled.
  const std::string empty = write_dataset(dir, "empty_text_document", 0);
  EXPECT_EQ(check({empty}), "--data-path: dataset 1 of 1, prefix '" + empty + "': the dataset holds no tokens");
  // End to end: the parser checks the files by default.
  EXPECT_EQ(parse_error(practice() + Argv{"--seq-length", "8"}), "");
  recipes::MegatronArgsOptions o;
  EXPECT_NE(error_of([&] {
              recipes::parse_megatron_args(practice_model() + Argv{"--micro-batch-size", "1", "--train-iters", "4",
                                                                 "--lr", "1e-3", "--data-path", missing},
                                         o);
            }).find(".idx does not exist"),
            std::string::npos);
}

}  // namespace
}  // namespace qk::test
