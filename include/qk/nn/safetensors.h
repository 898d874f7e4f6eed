// Reading and writing the safetensors format (huggingface/safetensors), so
// checkpoints move between qianka and PyTorch.
//
//   qk::nn::TensorMap t = {{"fc.weight", w}, {"fc.bias", b}};
//   qk::nn::save_safetensors("model.safetensors", t, {{"step", "100"}});
//   qk::nn::SafetensorsFile f = qk::nn::load_safetensors("model.safetensors");
//   f.tensors.at("fc.weight");  f.metadata.at("step");
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON
//   {"fc.bias": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, ...,
//    "__metadata__": {"step": "100"}}
// padded with spaces so the data starts 8-byte aligned, then the tensors'
// bytes back to back (offsets relative to the data start). Tensors are laid
// out by decreasing element size, then name (as the reference writer does),
// so each one is aligned. Writes are atomic (temporary file + rename).
//
// Reading validates everything: the length word, the JSON, every dtype,
// shape and offset (in range, no overlap or hole, size == numel * itemsize).
// A bad file raises qk::IoError naming the file and the offending entry;
// it never crashes. Only this file's tensor layer is used (no autograd).
#pragma once

#include <map>
#include <string>

#include "qk/tensor/tensor.h"

namespace qk::nn {

// Sorted by name, as in the file's header.
using TensorMap = std::map<std::string, Tensor>;
using Metadata = std::map<std::string, std::string>;

struct SafetensorsFile {
  TensorMap tensors;  // contiguous CPU tensors, copied out of the file
  Metadata metadata;  // the optional "__metadata__" string map
};

// Tensors may be on any device and strided; they are written contiguous.
void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const Metadata& metadata = {});
SafetensorsFile load_safetensors(const std::string& path);

// The same over bytes in memory; `name` labels errors (a file path, "<buffer>").
std::string serialize_safetensors(const TensorMap& tensors, const Metadata& metadata = {});
SafetensorsFile parse_safetensors(const void* data, size_t size, const std::string& name);

// "F32", "BF16", "BOOL" ... and back; throws for dtypes qianka lacks.
const char* safetensors_dtype_name(DType t);
DType parse_safetensors_dtype(const std::string& s, const std::string& context);

}  // namespace qk::nn
