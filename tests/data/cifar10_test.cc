// Reading the CIFAR-10 binary release, and every way a file can be broken.
#include "qk/data/cifar10.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "data/test_util.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"

namespace {

namespace fs = std::filesystem;
using qk::data::kCifarRecordBytes;
using qk::test::TempDir;

// Writes a small synthetic set and returns its batches folder.
std::string small_set(const TempDir& t, int64_t train = 50, int64_t test = 20) {
  return qk::data::synth_cifar(t.path(), {.num_train = train, .num_test = test, .seed = 7});
}

// Runs f, expects an IoError whose message holds every needle.
template <typename F>
void expect_io_error(F&& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected qk::IoError";
  } catch (const qk::IoError& e) {
    for (const auto& n : needles) EXPECT_NE(e.message().find(n), std::string::npos) << "'" << n << "' not in: " << e.what();
  }
}

void append_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::app);
  f << bytes;
}

TEST(Cifar10, LoadsSyntheticSetWithShapesLabelsAndClasses) {
  TempDir t("cifar_load");
  const std::string dir = small_set(t, 53, 21);
  EXPECT_EQ(dir, t / "cifar-10-batches-bin");
  for (const auto& f : qk::data::cifar10_file_names()) EXPECT_TRUE(qk::file_exists(dir + "/" + f)) << f;
  // 53 = 11 + 11 + 11 + 10 + 10 records.
  EXPECT_EQ(fs::file_size(dir + "/data_batch_1.bin"), 11u * kCifarRecordBytes);
  EXPECT_EQ(fs::file_size(dir + "/data_batch_5.bin"), 10u * kCifarRecordBytes);
  EXPECT_TRUE(qk::data::cifar10_present(t.path()));

  const auto d = qk::data::load_cifar10(t.path());
  EXPECT_EQ(d.dir, dir);
  EXPECT_TRUE(d.synthetic);
  EXPECT_EQ(d.classes, qk::data::cifar10_class_names());
  EXPECT_EQ(d.train.images.shape(), (qk::Shape{53, 3, 32, 32}));
  EXPECT_EQ(d.train.images.dtype(), qk::DType::u8);
  EXPECT_EQ(d.train.labels.shape(), (qk::Shape{53}));
  EXPECT_EQ(d.train.labels.dtype(), qk::DType::i64);
  EXPECT_EQ(d.test.size(), 21);
  for (int64_t l : d.train.labels.to_vector<int64_t>()) EXPECT_TRUE(l >= 0 && l < 10);

  // The batches folder itself is accepted too.
  const auto d2 = qk::data::load_cifar10(dir);
  EXPECT_EQ(d2.train.labels.to_vector<int64_t>(), d.train.labels.to_vector<int64_t>());
}

TEST(Cifar10, ReadsRecordsByteForByte) {
  TempDir t("cifar_bytes");
  std::string recs;
  for (int r = 0; r < 3; ++r) {
    recs += static_cast<char>(r * 4);  // labels 0, 4, 8
    for (int i = 0; i < 3072; ++i) recs += static_cast<char>((i * 7 + r * 13) & 0xff);
  }
  qk::atomic_write_file(t / "b.bin", recs);
  const auto s = qk::data::read_cifar10_batch(t / "b.bin");
  EXPECT_EQ(s.labels.to_vector<int64_t>(), (std::vector<int64_t>{0, 4, 8}));
  const auto px = s.images.to_vector<uint8_t>();
  ASSERT_EQ(px.size(), 3u * 3072);
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 3072; i += 97)  // [r, c, y, x] = record r, byte 1 + c*1024 + y*32 + x
      EXPECT_EQ(px[r * 3072 + i], static_cast<uint8_t>((i * 7 + r * 13) & 0xff));
}

TEST(Cifar10, MissingFolderSaysHowToGetData) {
  TempDir t("cifar_nodir");
  EXPECT_FALSE(qk::data::cifar10_present(t / "nothing"));
  expect_io_error([&] { qk::data::load_cifar10(t / "nothing"); },
                  {"nothing/cifar-10-batches-bin", "does not exist", "qk data synth-cifar", "qk data download-cifar"});
}

TEST(Cifar10, MissingFileIsNamed) {
  TempDir t("cifar_missing");
  const std::string dir = small_set(t);
  fs::remove(dir + "/data_batch_3.bin");
  fs::remove(dir + "/batches.meta.txt");
  EXPECT_FALSE(qk::data::cifar10_present(t.path()));
  expect_io_error([&] { qk::data::load_cifar10(t.path()); },
                  {"incomplete", "data_batch_3.bin", "batches.meta.txt", "qk data synth-cifar"});
  expect_io_error([&] { qk::data::read_cifar10_batch(dir + "/data_batch_3.bin"); }, {"data_batch_3.bin", "missing"});
}

TEST(Cifar10, TruncatedFileIsRefused) {
  TempDir t("cifar_trunc");
  const std::string dir = small_set(t);
  const std::string f = dir + "/data_batch_2.bin";
  fs::resize_file(f, fs::file_size(f) - 100);
  expect_io_error([&] { qk::data::load_cifar10(t.path()); },
                  {"data_batch_2.bin", "not a whole number of 3073-byte records", "truncated"});
}

TEST(Cifar10, OversizeFilesAreRefused) {
  TempDir t("cifar_over");
  const std::string dir = small_set(t);
  // Stray bytes after the last record.
  append_bytes(dir + "/test_batch.bin", "extra");
  expect_io_error([&] { qk::data::load_cifar10(t.path()); }, {"test_batch.bin", "5 stray bytes"});
  // Whole records, but more than a CIFAR-10 batch holds.
  std::string big(static_cast<size_t>(10001 * kCifarRecordBytes), '\0');
  qk::atomic_write_file(t / "big.bin", big);
  expect_io_error([&] { qk::data::read_cifar10_batch(t / "big.bin"); }, {"big.bin", "10001 records", "more than the 10000"});
}

TEST(Cifar10, EmptyFileIsRefused) {
  TempDir t("cifar_empty");
  const std::string dir = small_set(t);
  fs::resize_file(dir + "/data_batch_5.bin", 0);
  expect_io_error([&] { qk::data::load_cifar10(t.path()); }, {"data_batch_5.bin", "empty"});
}

TEST(Cifar10, BadLabelNamesFileRecordAndValue) {
  TempDir t("cifar_label");
  const std::string dir = small_set(t);
  {
    std::fstream f(dir + "/data_batch_4.bin", std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(2 * kCifarRecordBytes);
    f.put(static_cast<char>(10));
  }
  expect_io_error([&] { qk::data::load_cifar10(t.path()); },
                  {"data_batch_4.bin", "record 2", "byte offset 6146", "label 10", "expected 0..9"});
}

TEST(Cifar10, BadMetaFileIsRefused) {
  TempDir t("cifar_meta");
  const std::string dir = small_set(t);
  qk::atomic_write_file(dir + "/batches.meta.txt", std::string("airplane\nautomobile\n\n"));
  expect_io_error([&] { qk::data::load_cifar10(t.path()); }, {"batches.meta.txt", "names 2 classes, expected 10"});
  // Official layout: names, a trailing empty line, maybe CRLF.
  std::string crlf;
  for (const auto& n : qk::data::cifar10_class_names()) crlf += n + "\r\n";
  qk::atomic_write_file(dir + "/batches.meta.txt", crlf + "\r\n");
  EXPECT_EQ(qk::data::read_cifar10_meta(dir + "/batches.meta.txt"), qk::data::cifar10_class_names());
}

}  // namespace
