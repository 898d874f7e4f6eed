// CIFAR-10 in its official binary release, read into tensors, and a
// synthetic stand-in written in exactly the same format.
//
//   qk::data::Cifar10 d = qk::data::load_cifar10("data");   // data/cifar-10-batches-bin/
//   d.train.images;   // u8  [50000, 3, 32, 32]
//   d.train.labels;   // i64 [50000], 0..9
//   d.classes[3];     // "cat"
//
//   qk::data::synth_cifar("data", {.num_train = 1000, .num_test = 200, .seed = 1});
//
// The binary release (cifar-10-binary.tar.gz) unpacks to cifar-10-batches-bin/:
//   data_batch_1.bin .. data_batch_5.bin   10000 records each (training set)
//   test_batch.bin                         10000 records
//   batches.meta.txt                       the 10 class names, one per line
// A record is 3073 bytes: the label (0..9), then the 32x32 red plane, the
// green plane and the blue plane, row-major: exactly one [3, 32, 32] image.
//
// Every file is validated (present, non-empty, a whole number of records, at
// most 10000 of them, labels 0..9, ten class names); a bad one throws
// qk::IoError naming the file, what is wrong and what to do.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qk/tensor/tensor.h"

namespace qk::data {

inline constexpr int64_t kCifarChannels = 3;
inline constexpr int64_t kCifarHeight = 32;
inline constexpr int64_t kCifarWidth = 32;
inline constexpr int64_t kCifarImageBytes = kCifarChannels * kCifarHeight * kCifarWidth;  // 3072
inline constexpr int64_t kCifarRecordBytes = 1 + kCifarImageBytes;                         // 3073
inline constexpr int64_t kCifarNumClasses = 10;
inline constexpr int64_t kCifarRecordsPerBatch = 10000;  // per file in the official release
inline constexpr int kCifarNumTrainBatches = 5;
inline constexpr const char* kCifarBatchesDirName = "cifar-10-batches-bin";
// Written by synth_cifar next to the batches; its presence marks a synthetic set.
inline constexpr const char* kCifarSyntheticMarker = "SYNTHETIC.txt";

// The official class names, in label order.
const std::vector<std::string>& cifar10_class_names();

struct Cifar10Split {
  Tensor images;  // u8 [N, 3, 32, 32]
  Tensor labels;  // i64 [N], each in 0..9
  int64_t size() const { return labels.defined() ? labels.numel() : 0; }
};

struct Cifar10 {
  Cifar10Split train;  // data_batch_1..5, in file order
  Cifar10Split test;   // test_batch
  std::vector<std::string> classes;  // from batches.meta.txt
  std::string dir;     // the cifar-10-batches-bin folder read
  bool synthetic = false;  // written by synth_cifar (SYNTHETIC.txt present)
};

// The folder holding the batch files: `data_dir` itself when it holds
// test_batch.bin, else data_dir/cifar-10-batches-bin (which may not exist).
std::string cifar10_batches_dir(const std::string& data_dir);
// Whether every file of the release is present under data_dir (not validated).
bool cifar10_present(const std::string& data_dir);
// The file names of the release, relative to the batches folder.
std::vector<std::string> cifar10_file_names();

// Reads one batch file (a whole number of 3073-byte records); throws IoError
// naming the file when it is missing, empty, torn, too large or has a label
// outside 0..9.
Cifar10Split read_cifar10_batch(const std::string& path);
// Reads batches.meta.txt: exactly ten non-empty names.
std::vector<std::string> read_cifar10_meta(const std::string& path);
// Reads and validates the whole release under `data_dir` (see
// cifar10_batches_dir). A missing folder or file says how to get the data.
Cifar10 load_cifar10(const std::string& data_dir);

struct SynthCifarOptions {
  int64_t num_train = 50000;  // split over the five training files; 5..50000
  int64_t num_test = 10000;   // 1..10000
  uint64_t seed = 0;
};

// Writes a deterministic synthetic CIFAR-10 into out_dir/cifar-10-batches-bin/
// in the official format (same file names, records and meta file; full size
// by default), plus SYNTHETIC.txt. Each class is a shape with a surface
// texture (solid / striped) in a jittered class colour, drawn at a random
// position, scale and rotation over a noisy two-colour background, with a
// distractor shape of another kind in some images: learnable, but not in
// one epoch. Classes are balanced; the
// same (options) give the same bytes on any machine and thread count.
// Returns the batches folder.
std::string synth_cifar(const std::string& out_dir, const SynthCifarOptions& opts = {});

// Draws one synthetic image of `label` into dst (3072 bytes, [3, 32, 32]);
// `key` selects the random draws. Exposed for tests and examples.
void synth_cifar_image(int64_t label, uint64_t key, uint8_t* dst);

}  // namespace qk::data
