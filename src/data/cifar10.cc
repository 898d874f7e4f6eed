// Reading and validating the CIFAR-10 binary release (see qk/data/cifar10.h).
#include "qk/data/cifar10.h"

#include <cctype>
#include <cstring>
#include <filesystem>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/base/log.h"

namespace qk::data {
namespace {

namespace fs = std::filesystem;

// What to tell a user whose data folder is missing or broken.
constexpr const char* kHowToGet =
    "Get the official release with `qk data download-cifar --data-dir DIR` (or download "
    "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz and unpack it into DIR), or write a "
    "synthetic stand-in with `qk data synth-cifar --out DIR`";

std::string train_batch_name(int k) { return "data_batch_" + std::to_string(k) + ".bin"; }

// Concatenates splits along the first dimension.
Cifar10Split concat(const std::vector<Cifar10Split>& parts) {
  int64_t n = 0;
  for (const auto& p : parts) n += p.size();
  Cifar10Split out;
  out.images = empty({n, kCifarChannels, kCifarHeight, kCifarWidth}, DType::u8);
  out.labels = empty({n}, DType::i64);
  auto* img = out.images.data_ptr<uint8_t>();
  auto* lab = out.labels.data_ptr<int64_t>();
  for (const auto& p : parts) {
    std::memcpy(img, p.images.data_ptr<uint8_t>(), static_cast<size_t>(p.size() * kCifarImageBytes));
    std::memcpy(lab, p.labels.data_ptr<int64_t>(), static_cast<size_t>(p.size()) * sizeof(int64_t));
    img += p.size() * kCifarImageBytes;
    lab += p.size();
  }
  return out;
}

}  // namespace

const std::vector<std::string>& cifar10_class_names() {
  static const std::vector<std::string> names = {"airplane", "automobile", "bird",  "cat",  "deer",
                                                 "dog",      "frog",       "horse", "ship", "truck"};
  return names;
}

std::vector<std::string> cifar10_file_names() {
  std::vector<std::string> v;
  for (int k = 1; k <= kCifarNumTrainBatches; ++k) v.push_back(train_batch_name(k));
  v.push_back("test_batch.bin");
  v.push_back("batches.meta.txt");
  return v;
}

std::string cifar10_batches_dir(const std::string& data_dir) {
  std::error_code ec;
  if (fs::is_regular_file(fs::path(data_dir) / "test_batch.bin", ec)) return data_dir;
  return (fs::path(data_dir) / kCifarBatchesDirName).string();
}

bool cifar10_present(const std::string& data_dir) {
  const fs::path dir = cifar10_batches_dir(data_dir);
  std::error_code ec;
  for (const auto& f : cifar10_file_names())
    if (!fs::is_regular_file(dir / f, ec)) return false;
  return true;
}

Cifar10Split read_cifar10_batch(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    QK_THROW(IoError, "CIFAR-10 batch file ", path, " is missing. ", kHowToGet);
  const MappedFile f(path);
  const auto size = static_cast<int64_t>(f.size());
  QK_CHECK_AS(IoError, size > 0, "CIFAR-10 batch file ", path,
              " is empty: expected records of 3073 bytes (1 label byte + 3072 pixel bytes). The file "
              "is damaged; delete it and download or generate the data again. ",
              kHowToGet);
  QK_CHECK_AS(IoError, size % kCifarRecordBytes == 0, "CIFAR-10 batch file ", path, " is ", size,
              " bytes, not a whole number of 3073-byte records (", size / kCifarRecordBytes,
              " records and ", size % kCifarRecordBytes,
              " stray bytes): it is truncated or not from the binary release (the python and matlab "
              "releases, and CIFAR-100, use other formats). Delete it and download or generate the "
              "data again. ",
              kHowToGet);
  const int64_t n = size / kCifarRecordBytes;
  QK_CHECK_AS(IoError, n <= kCifarRecordsPerBatch, "CIFAR-10 batch file ", path, " holds ", n,
              " records, more than the ", kCifarRecordsPerBatch,
              " of a CIFAR-10 batch file: it is not from the CIFAR-10 binary release. ", kHowToGet);
  Cifar10Split s;
  s.images = empty({n, kCifarChannels, kCifarHeight, kCifarWidth}, DType::u8);
  s.labels = empty({n}, DType::i64);
  auto* img = s.images.data_ptr<uint8_t>();
  auto* lab = s.labels.data_ptr<int64_t>();
  const auto* src = reinterpret_cast<const uint8_t*>(f.data());
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* rec = src + i * kCifarRecordBytes;
    QK_CHECK_AS(IoError, rec[0] < kCifarNumClasses, "CIFAR-10 batch file ", path, ": record ", i,
                " (byte offset ", i * kCifarRecordBytes, ") has label ", static_cast<int>(rec[0]),
                ", expected 0..9. The file is corrupt, or is CIFAR-100 (two label bytes per "
                "record). Delete it and download or generate the data again. ",
                kHowToGet);
    lab[i] = rec[0];
    std::memcpy(img + i * kCifarImageBytes, rec + 1, kCifarImageBytes);
  }
  return s;
}

std::vector<std::string> read_cifar10_meta(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    QK_THROW(IoError, "CIFAR-10 class-name file ", path, " is missing. ", kHowToGet);
  const std::string text = read_file(path);
  std::vector<std::string> names;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    size_t b = 0;
    while (b < line.size() && std::isspace(static_cast<unsigned char>(line[b]))) ++b;
    if (b < line.size()) names.push_back(line.substr(b));
    pos = end + 1;
  }
  QK_CHECK_AS(IoError, names.size() == static_cast<size_t>(kCifarNumClasses), "CIFAR-10 class-name file ",
              path, " names ", names.size(),
              " classes, expected 10 (one per line: airplane, automobile, ..., truck). Delete it and "
              "download or generate the data again. ",
              kHowToGet);
  for (const auto& n : names)
    QK_CHECK_AS(IoError, n.size() <= 64, "CIFAR-10 class-name file ", path, " has a ", n.size(),
                "-byte line, not a class name: it is not batches.meta.txt from the binary release. ",
                kHowToGet);
  return names;
}

Cifar10 load_cifar10(const std::string& data_dir) {
  const std::string dir = cifar10_batches_dir(data_dir);
  std::error_code ec;
  QK_CHECK_AS(IoError, fs::is_directory(dir, ec), "CIFAR-10 data not found: ", dir,
              " does not exist (expected data_batch_1..5.bin, test_batch.bin and batches.meta.txt "
              "there). ",
              kHowToGet);
  std::vector<std::string> missing;
  for (const auto& f : cifar10_file_names())
    if (!fs::is_regular_file(fs::path(dir) / f, ec)) missing.push_back(f);
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    QK_THROW(IoError, "CIFAR-10 data in ", dir, " is incomplete: missing ", list,
             ". Delete the folder and download or generate the data again. ", kHowToGet);
  }
  Cifar10 d;
  d.dir = dir;
  d.classes = read_cifar10_meta((fs::path(dir) / "batches.meta.txt").string());
  std::vector<Cifar10Split> parts;
  for (int k = 1; k <= kCifarNumTrainBatches; ++k)
    parts.push_back(read_cifar10_batch((fs::path(dir) / train_batch_name(k)).string()));
  d.train = concat(parts);
  d.test = read_cifar10_batch((fs::path(dir) / "test_batch.bin").string());
  d.synthetic = fs::is_regular_file(fs::path(dir) / kCifarSyntheticMarker, ec);
  QK_DEBUG("CIFAR-10: {} training and {} test images from {}{}", d.train.size(), d.test.size(), dir,
           d.synthetic ? " (synthetic)" : "");
  return d;
}

}  // namespace qk::data
