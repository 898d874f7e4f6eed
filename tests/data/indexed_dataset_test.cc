#include "qk/data/indexed_dataset.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/reference_tool.h"
#include "data/test_util.h"
#include "qk/base/error.h"

namespace {
using json = nlohmann::json;
using qk::data::DType;
using qk::data::IndexedDataset;
using qk::data::IndexedDatasetBuilder;
using qk::test::TempDir;

json load_expected(const std::string& prefix) {
  return json::parse(qk::read_file(qk::test::megatron_fixture(prefix + ".expected.json")));
}

#define SKIP_WITHOUT_FIXTURES()                                                          \
  if (!qk::file_exists(qk::test::megatron_fixture("README.md")))                          \
  GTEST_SKIP() << "Megatron fixtures not found at " << qk::test::megatron_fixture("")

class MegatronFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(MegatronFixture, ReaderReturnsWhatMegatronRead) {
  SKIP_WITHOUT_FIXTURES();
  const std::string prefix = GetParam();
  json e = load_expected(prefix);
  IndexedDataset ds(qk::test::megatron_fixture(prefix));
  EXPECT_EQ(static_cast<int>(ds.dtype()), e["dtype_code"].get<int>());
  EXPECT_EQ(qk::data::dtype_name(ds.dtype()), e["dtype"].get<std::string>());
  EXPECT_EQ(ds.num_sequences(), e["num_sequences"].get<size_t>());
  EXPECT_EQ(ds.num_documents(), e["num_documents"].get<size_t>());
  EXPECT_EQ(ds.sequence_lengths(), e["sequence_lengths"].get<std::vector<int32_t>>());
  EXPECT_EQ(ds.sequence_pointers(), e["sequence_pointers"].get<std::vector<int64_t>>());
  EXPECT_EQ(ds.document_indices(), e["document_indices"].get<std::vector<int64_t>>());
  auto seqs = e["sequences"].get<std::vector<std::vector<int64_t>>>();
  for (size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(ds.get(i), seqs[i]) << "sequence " << i;
  auto docs = e["documents"].get<std::vector<std::vector<int64_t>>>();
  for (size_t k = 0; k < docs.size(); ++k) EXPECT_EQ(ds.document(k), docs[k]) << "document " << k;
  for (const auto& g : e["get_examples"]) {
    std::optional<size_t> len;
    if (!g["length"].is_null()) len = g["length"].get<size_t>();
    EXPECT_EQ(ds.get(g["idx"].get<size_t>(), g["offset"].get<size_t>(), len),
              g["tokens"].get<std::vector<int64_t>>())
        << g.dump();
  }
}

TEST_P(MegatronFixture, WriterIsByteIdenticalToMegatron) {
  SKIP_WITHOUT_FIXTURES();
  const std::string prefix = GetParam();
  json e = load_expected(prefix);
  auto seqs = e["sequences"].get<std::vector<std::vector<int64_t>>>();
  auto doc_idx = e["document_indices"].get<std::vector<int64_t>>();
  TempDir dir("megatron_writer");
  const std::string out = dir / prefix;
  IndexedDatasetBuilder b(qk::data::bin_path(out), static_cast<DType>(e["dtype_code"].get<int>()));
  for (size_t k = 0; k + 1 < doc_idx.size(); ++k) {
    std::vector<int64_t> tokens;
    std::vector<int32_t> lengths;
    for (int64_t s = doc_idx[k]; s < doc_idx[k + 1]; ++s) {
      tokens.insert(tokens.end(), seqs[s].begin(), seqs[s].end());
      lengths.push_back(static_cast<int32_t>(seqs[s].size()));
    }
    b.add_document(std::span<const int64_t>(tokens), lengths);
  }
  b.finalize(qk::data::idx_path(out));
  EXPECT_EQ(qk::read_file(out + ".idx"), qk::read_file(qk::test::megatron_fixture(prefix + ".idx")));
  EXPECT_EQ(qk::read_file(out + ".bin"), qk::read_file(qk::test::megatron_fixture(prefix + ".bin")));
}

INSTANTIATE_TEST_SUITE_P(IndexedDataset, MegatronFixture,
                         ::testing::Values("megatron_u16_text_document", "megatron_i32_text_document"));

// A small dataset with empty documents and an empty sequence.
std::string write_small(const TempDir& dir, DType dtype = DType::kUint16) {
  const std::string p = dir / "small";
  IndexedDatasetBuilder b(qk::data::bin_path(p), dtype);
  std::vector<int32_t> d0 = {5, 6, 7, 50256}, l0 = {3, 1};
  b.add_document(std::span<const int32_t>(d0), l0);
  b.add_document(std::span<const int32_t>(), std::span<const int32_t>());
  std::vector<int32_t> d2 = {1, 2}, l2 = {0, 2};
  b.add_document(std::span<const int32_t>(d2), l2);
  EXPECT_EQ(b.num_tokens(), 6);
  b.finalize(qk::data::idx_path(p));
  return p;
}

TEST(IndexedDataset, RoundTripWithEmptyDocuments) {
  TempDir dir("idx_roundtrip");
  IndexedDataset ds(write_small(dir));
  EXPECT_EQ(ds.num_documents(), 3u);
  EXPECT_EQ(ds.num_sequences(), 4u);
  EXPECT_EQ(ds.num_tokens(), 6);
  EXPECT_EQ(ds.document(0), (std::vector<int64_t>{5, 6, 7, 50256}));
  EXPECT_TRUE(ds.document(1).empty());
  EXPECT_EQ(ds.document(2), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ds.get(0, 1, 2), (std::vector<int64_t>{6, 7}));
  EXPECT_THROW(ds.get(0, 2, 5), qk::IndexError);
  EXPECT_THROW(ds.get(9), qk::IndexError);
  EXPECT_THROW(ds.document(3), qk::IndexError);
}

TEST(IndexedDataset, NumpyReaderFromFormatDescriptionReadsOurFiles) {
  if (!qk::file_exists("/usr/bin/python3")) QK_MISSING_REFERENCE_TOOL("/usr/bin/python3 (Debian: python3)");
  TempDir dir("idx_numpy");
  for (DType t : {DType::kUint16, DType::kInt32, DType::kInt64}) {
    const std::string p = write_small(dir, t);
    const std::string cmd = "/usr/bin/python3 '" QK_SOURCE_DIR
                            "/tests/data/scripts/read_indexed_dataset.py' '" + p + "' 2>&1";
    FILE* f = ::popen(cmd.c_str(), "r");
    ASSERT_NE(f, nullptr);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    int rc = ::pclose(f);
    if (out.find("No module named 'numpy'") != std::string::npos)
      QK_MISSING_REFERENCE_TOOL("python3 with numpy (Debian: python3-numpy)");
    ASSERT_EQ(rc, 0) << out;
    json j = json::parse(out);
    IndexedDataset ds(p);
    EXPECT_EQ(j["dtype"].get<std::string>(), qk::data::dtype_name(t));
    EXPECT_EQ(j["sequence_lengths"].get<std::vector<int32_t>>(), ds.sequence_lengths());
    EXPECT_EQ(j["sequence_pointers"].get<std::vector<int64_t>>(), ds.sequence_pointers());
    EXPECT_EQ(j["document_indices"].get<std::vector<int64_t>>(), ds.document_indices());
    auto seqs = j["sequences"].get<std::vector<std::vector<int64_t>>>();
    ASSERT_EQ(seqs.size(), ds.num_sequences());
    for (size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], ds.get(i));
  }
}

TEST(IndexedDatasetBuilder, RejectsTokensThatDoNotFitTheDtype) {
  TempDir dir("idx_narrow");
  IndexedDatasetBuilder b(dir / "x.bin", DType::kUint16);
  std::vector<int32_t> t = {70000}, l = {1};
  EXPECT_THROW(b.add_document(std::span<const int32_t>(t), l), qk::ValueError);
  std::vector<int32_t> l_bad = {2};
  std::vector<int32_t> ok = {1};
  EXPECT_THROW(b.add_document(std::span<const int32_t>(ok), l_bad), qk::ValueError);
}

TEST(IndexedDatasetBuilder, OptimalDtypeFollowsMegatron) {
  EXPECT_EQ(qk::data::optimal_dtype(50257), DType::kUint16);
  EXPECT_EQ(qk::data::optimal_dtype(65499), DType::kUint16);
  EXPECT_EQ(qk::data::optimal_dtype(65500), DType::kInt32);
  EXPECT_EQ(qk::data::optimal_dtype(128256), DType::kInt32);
}

// Corrupts a copy of a good index and expects an IoError naming the file.
void expect_corrupt(const std::string& prefix, const std::string& idx_bytes,
                    const std::string& needle) {
  qk::atomic_write_file(prefix + ".idx", idx_bytes);
  try {
    IndexedDataset ds(prefix);
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const qk::IoError& e) {
    EXPECT_NE(e.message().find(prefix + ".idx"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
  }
}

TEST(IndexedDataset, CorruptIndexGivesClearErrors) {
  TempDir dir("idx_corrupt");
  const std::string p = write_small(dir);
  const std::string good = qk::read_file(p + ".idx");
  expect_corrupt(p, good.substr(0, 20), "truncated");
  expect_corrupt(p, good.substr(0, good.size() - 3), "truncated");
  std::string bad = good;
  bad[0] = 'X';
  expect_corrupt(p, bad, "bad magic");
  bad = good;
  bad[9] = 2;
  expect_corrupt(p, bad, "version 2");
  bad = good;
  bad[17] = 42;
  expect_corrupt(p, bad, "dtype code 42");
  bad = good;
  bad[18] = static_cast<char>(0xff);
  bad[25] = 0x7f;
  expect_corrupt(p, bad, "impossible");
  bad = good;
  bad[34] = 100;  // first sequence length 100: runs past the .bin
  expect_corrupt(p, bad, "past the end");
  bad = good;
  bad[34 + 4 * 4 + 8] = 1;  // second pointer off by one
  expect_corrupt(p, bad, "running sum");
  bad = good + std::string(8, '\0');
  expect_corrupt(p, bad, "trailing");
  bad = good;
  bad[good.size() - 8] = 9;  // last document index > sequence count
  expect_corrupt(p, bad, "document index");
}

TEST(IndexedDataset, MissingFilesAreNamed) {
  TempDir dir("idx_missing");
  try {
    IndexedDataset ds(dir / "nope");
    ADD_FAILURE();
  } catch (const qk::IoError& e) {
    EXPECT_NE(e.message().find("nope.idx"), std::string::npos) << e.message();
  }
  const std::string p = write_small(dir);
  std::remove((p + ".bin").c_str());
  EXPECT_THROW(IndexedDataset ds(p), qk::IoError);
}

// Found by fuzz/idx_fuzz.cc: converting a NaN or huge float token to int64
// was undefined behaviour; it is now a clear error naming the .bin.
TEST(IndexedDataset, NonFiniteFloatTokensAreAnError) {
  TempDir dir("idx_float");
  const std::string p = dir / "f";
  IndexedDatasetBuilder b(p + ".bin", DType::kFloat64);
  std::vector<int32_t> t = {3, 4, 5}, l = {3};
  b.add_document(std::span<const int32_t>(t), l);
  b.finalize(p + ".idx");
  EXPECT_EQ(IndexedDataset(p).get(0), (std::vector<int64_t>{3, 4, 5}));
  for (double bad : {std::nan(""), 1e300, -1e19}) {
    std::string bin = qk::read_file(p + ".bin");
    std::memcpy(bin.data() + 8, &bad, 8);
    std::ofstream(p + ".bin", std::ios::binary | std::ios::trunc).write(bin.data(), 24);
    IndexedDataset ds(p);
    try {
      ds.get(0);
      FAIL() << "expected an error for " << bad;
    } catch (const qk::IoError& e) {
      EXPECT_NE(std::string(e.what()).find("f.bin': sequence 0 token 1"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
