// safetensors: round trips of every dtype, the exact byte layout, module
// checkpoints, interoperability with a file PyTorch wrote (and PyTorch
// reading ours), and every kind of bad file raising a clear IoError.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common/fixtures.h"
#include "common/reference_tool.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/nn/nn.h"

namespace {

using namespace qk;
namespace nn = qk::nn;
using qk::test::all_close;

std::filesystem::path temp_dir() {
  return std::filesystem::temp_directory_path() / ("qk_st_" + std::to_string(::getpid()));
}

std::string temp_path(const std::string& name) {
  std::filesystem::create_directories(temp_dir());
  return (temp_dir() / name).string();
}

// Removes this process's scratch directory once every test has run.
class RemoveTempDir : public ::testing::Environment {
 public:
  void TearDown() override { std::filesystem::remove_all(temp_dir()); }
};
[[maybe_unused]] ::testing::Environment* const kRemoveTempDir =
    ::testing::AddGlobalTestEnvironment(new RemoveTempDir);

nn::TensorMap sample_tensors() {
  return {{"a.f32", from_vector<float>({1.5f, -2, 3}, {3})},
          {"b.f64", from_vector<double>({1e-300, 2}, {2, 1})},
          {"c.f16", from_vector<float>({0.5f, -1, 65504}, {3}).to(DType::f16)},
          {"d.bf16", from_vector<float>({1, 2, 3, 4}, {2, 2}).to(DType::bf16)},
          {"e.i32", from_vector<int32_t>({-7, 2147483647}, {2})},
          {"f.i64", from_vector<int64_t>({-1, 1LL << 40}, {1, 2})},
          {"g.u8", from_vector<uint8_t>({0, 255}, {2})},
          {"h.bool", from_vector<bool>({true, false, true}, {3})},
          {"i.empty", zeros({0, 4})},
          {"j.scalar", full({}, 3.25)}};
}

void expect_same(const nn::TensorMap& got, const nn::TensorMap& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [k, t] : want) {
    ASSERT_TRUE(got.count(k)) << k;
    const Tensor& g = got.at(k);
    EXPECT_EQ(g.dtype(), t.dtype()) << k;
    EXPECT_EQ(g.shape(), t.shape()) << k;
    EXPECT_EQ(g.to_vector<double>(), t.to_vector<double>()) << k;
  }
}

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  auto path = temp_path("all.safetensors");
  nn::save_safetensors(path, sample_tensors(), {{"step", "12"}, {"note", "hello"}});
  auto f = nn::load_safetensors(path);
  expect_same(f.tensors, sample_tensors());
  EXPECT_EQ(f.metadata, (nn::Metadata{{"note", "hello"}, {"step", "12"}}));
  // Strided input is written contiguous.
  Tensor t = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).t();
  nn::save_safetensors(path, {{"t", t}});
  EXPECT_EQ(nn::load_safetensors(path).tensors.at("t").to_vector<float>(),
            (std::vector<float>{1, 4, 2, 5, 3, 6}));
  std::filesystem::remove(path);
}

TEST(Safetensors, LayoutFollowsTheSpec) {
  std::string bytes = nn::serialize_safetensors(sample_tensors(), {{"k", "v"}});
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "data must start 8-byte aligned";
  auto h = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(h["__metadata__"]["k"], "v");
  EXPECT_EQ(h["d.bf16"]["dtype"], "BF16");
  EXPECT_EQ(h["h.bool"]["dtype"], "BOOL");
  EXPECT_EQ(h["d.bf16"]["shape"], nlohmann::json::array({2, 2}));
  // Every tensor starts at a multiple of its element size; offsets tile the data.
  uint64_t total = 0;
  for (const auto& [k, v] : h.items()) {
    if (k == "__metadata__") continue;
    uint64_t b = v["data_offsets"][0], e = v["data_offsets"][1];
    uint64_t item = dtype_size(nn::parse_safetensors_dtype(v["dtype"], k));
    EXPECT_EQ(b % item, 0u) << k;
    total += e - b;
  }
  EXPECT_EQ(8 + n + total, bytes.size());
  float a[3];
  uint64_t off = h["a.f32"]["data_offsets"][0];
  std::memcpy(a, bytes.data() + 8 + n + off, 12);
  EXPECT_EQ(a[2], 3.0f);
}

TEST(Safetensors, ModuleCheckpointRoundTrip) {
  auto path = temp_path("model.safetensors");
  manual_seed(5);
  nn::Sequential a(nn::Conv2d(3, 4, 3), nn::BatchNorm2d(4), nn::Flatten(), nn::Linear(4, 2));
  a(randn({2, 3, 3, 3}));  // moves the running stats
  nn::save(*a, path, {{"epoch", "3"}});
  manual_seed(6);
  nn::Sequential b(nn::Conv2d(3, 4, 3), nn::BatchNorm2d(4), nn::Flatten(), nn::Linear(4, 2));
  auto meta = nn::load(*b, path);
  EXPECT_EQ(meta.at("epoch"), "3");
  for (const auto& item : a->state_dict())
    EXPECT_EQ(b->state_dict()[item.key()].to_vector<double>(), item.value().to_vector<double>()) << item.key();
  // A model of another shape: the error names the file, the key and both shapes.
  nn::Sequential c(nn::Conv2d(3, 4, 3), nn::BatchNorm2d(4), nn::Flatten(), nn::Linear(4, 3));
  try {
    nn::load(*c, path);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find("'3.weight'"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 4]"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 4]"), std::string::npos) << m;
  }
  std::filesystem::remove(path);
}

TEST(Safetensors, ReadsAFileWrittenByPython) {
  auto f = nn::load_safetensors(std::string(QK_SOURCE_DIR) + "/tests/nn/data/torch_written.safetensors");
  auto fx = qk::test::load_fixture("nn_safetensors_ref.json");
  EXPECT_EQ(f.metadata.at("format"), "pt");
  ASSERT_EQ(f.tensors.size(), fx.j["tensors"].size());
  for (const auto& [k, t] : f.tensors) {
    Tensor want = fx.tensor(k);
    EXPECT_EQ(t.dtype(), want.dtype()) << k;
    EXPECT_TRUE(all_close(t.to(DType::f64), want.to(DType::f64), 0, 0)) << k;
  }
}

// PyTorch reads our file: gen_nn.py --read parses it with torch + struct +
// json and prints the values. Skipped where Debian's python3-torch is absent.
TEST(Safetensors, PythonReadsOurFile) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
    QK_MISSING_REFERENCE_TOOL("/usr/bin/python3 with torch (Debian: python3-torch)");
  auto path = temp_path("for_python.safetensors");
  nn::save_safetensors(path, sample_tensors(), {{"writer", "qianka"}});
  std::string cmd = "/usr/bin/python3 " + std::string(QK_SOURCE_DIR) + "/tests/fixtures/gen_nn.py --read " + path;
  std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(cmd.c_str(), "r"), ::pclose);
  ASSERT_TRUE(p);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p.get())) > 0) out.append(buf, n);
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["metadata"]["writer"], "qianka");
  for (const auto& [k, t] : sample_tensors()) {
    const auto& e = j["tensors"][k];
    EXPECT_EQ(e["dtype"], nn::safetensors_dtype_name(t.dtype())) << k;
    EXPECT_EQ(e["shape"].get<Shape>(), t.shape()) << k;
    EXPECT_EQ(e["data"].get<std::vector<double>>(), t.to_vector<double>()) << k;
  }
  std::filesystem::remove(path);
}

// ---- bad files ----
void expect_io_error(const std::string& bytes, const std::string& needle) {
  auto path = temp_path("bad.safetensors");
  atomic_write_file(path, bytes);
  try {
    nn::load_safetensors(path);
    ADD_FAILURE() << "expected IoError containing '" << needle << "'";
  } catch (const IoError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find(needle), std::string::npos) << m;
  }
}

std::string with_header(const std::string& json, const std::string& data) {
  uint64_t n = json.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + json + data;
}

TEST(Safetensors, EveryTruncationIsAnError) {
  std::string good = nn::serialize_safetensors(sample_tensors());
  for (size_t len = 0; len < good.size(); ++len) {
    std::vector<char> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(len));  // exact size: ASan sees overreads
    EXPECT_THROW(nn::parse_safetensors(cut.data(), cut.size(), "<cut>"), IoError) << "truncated to " << len << " bytes";
  }
  // The same through a file, at a few lengths.
  auto path = temp_path("trunc.safetensors");
  for (size_t len : {size_t{0}, size_t{7}, size_t{8}, good.size() / 2, good.size() - 1}) {
    atomic_write_file(path, std::string_view(good).substr(0, len));
    EXPECT_THROW(nn::load_safetensors(path), IoError) << "truncated to " << len << " bytes";
  }
  std::filesystem::remove(path);
}

TEST(Safetensors, BadHeadersAreClearErrors) {
  std::string huge(8, '\xff');
  expect_io_error(huge, "limit 100 MB");
  expect_io_error(with_header("{}", "").substr(0, 9), "only 1 follow");
  expect_io_error(with_header("[1, 2]", ""), "does not start with a JSON object");
  expect_io_error(with_header("{\"a\": ", ""), "does not parse");
  expect_io_error(with_header(R"({"a": {"dtype": "F32", "shape": [2]}})", ""), "data_offsets");
  expect_io_error(with_header(R"({"a": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 4]}})", "abcd"),
                  "'Q7' is not supported");
  expect_io_error(with_header(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", "abcd"),
                  "non-negative integer");
  expect_io_error(with_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", "abcd"),
                  "out of the data section");
  expect_io_error(with_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", "abcd"),
                  "which needs 8");
  expect_io_error(with_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                  "b": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}})",
                              "abcdefgh"),
                  "overlaps");
  expect_io_error(with_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", "abcdefgh"),
                  "hole of 4 bytes");
  expect_io_error(with_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", "abcdefgh"),
                  "4 bytes follow the last tensor");
  expect_io_error(with_header(R"({"__metadata__": {"a": 1}})", ""), "is not a string");
  expect_io_error(with_header(R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296],
                                  "data_offsets": [0, 4]}})", "abcd"), "overflows");
  expect_io_error(with_header(R"({"a": {"dtype": "F64", "shape": [4611686018427387904], "data_offsets": [0, 0]}})", ""),
                  "needs more bytes than the file holds");
  EXPECT_THROW(nn::load_safetensors(temp_path("does_not_exist.safetensors")), IoError);
}

TEST(Safetensors, WriterRejectsBadNames) {
  EXPECT_THROW(nn::serialize_safetensors({{"__metadata__", zeros({1})}}), ValueError);
  EXPECT_THROW(nn::serialize_safetensors({{"x", Tensor()}}), ValueError);
}

}  // namespace
