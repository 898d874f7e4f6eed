// Fuzzes the Megatron .idx/.bin validation and reads: any input must either
// open and read back every sequence and document, or raise qk::Error.
// Input: 2 bytes of .bin length (little-endian), then the .idx bytes.
#include <fstream>
#include <string>

#include "fuzz_target.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/data/indexed_dataset.h"

namespace {
// Plain writes: atomic_write_file's fsyncs would make each input take ms.
void write_plain(const std::string& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
std::string prefix() {
  static const std::string p = fuzz_scratch_dir("idx") + "/x";
  return p;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t bin_len = data[0] | (static_cast<size_t>(data[1]) << 8);
  std::string bin(bin_len, '\0');
  for (size_t i = 0; i < bin_len; ++i) bin[i] = static_cast<char>(i * 31 + 7);
  write_plain(prefix() + ".bin", bin);
  write_plain(prefix() + ".idx", std::string_view(reinterpret_cast<const char*>(data) + 2, size - 2));
  try {
    qk::data::IndexedDataset ds(prefix());
    int64_t total = 0;
    for (size_t i = 0; i < ds.num_sequences(); ++i) total += static_cast<int64_t>(ds.get(i).size());
    for (size_t k = 0; k < ds.num_documents(); ++k) ds.document(k);
    if (total != ds.num_tokens()) __builtin_trap();  // validated sizes must add up
  } catch (const qk::Error&) {
  }
  return 0;
}

std::vector<std::string> fuzz_seeds() {
  std::vector<std::string> seeds;
  const std::string p = prefix() + "_seed";
  for (auto dtype : {qk::data::DType::kUint16, qk::data::DType::kInt32, qk::data::DType::kFloat64}) {
    qk::data::IndexedDatasetBuilder b(p + ".bin", dtype);
    std::vector<int32_t> t = {1, 2, 3, 4, 5}, l = {2, 3}, e;
    b.add_document(std::span<const int32_t>(t), l);
    b.add_document(std::span<const int32_t>(e), e);
    b.finalize(p + ".idx");
    const std::string bin = qk::read_file(p + ".bin");
    std::string s(2, '\0');
    s[0] = static_cast<char>(bin.size() & 0xff);
    s[1] = static_cast<char>(bin.size() >> 8);
    seeds.push_back(s + qk::read_file(p + ".idx"));
  }
  return seeds;
}
