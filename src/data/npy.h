// Minimal .npy (format 1.0) reader and writer for 1-D and 2-D little-endian
// integer arrays: the GPT index cache is readable by numpy.load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qk::data::npy {

// descr: "<i4" or "<i8"; shape: {n} or {n, m}; data holds n*m elements.
void save_i32(const std::string& path, const std::vector<int32_t>& data, std::vector<int64_t> shape);
void save_i64(const std::string& path, const std::vector<int64_t>& data, std::vector<int64_t> shape);
// Throws IoError naming the file when it is not an .npy of that dtype/rank.
std::vector<int32_t> load_i32(const std::string& path, std::vector<int64_t>* shape);
std::vector<int64_t> load_i64(const std::string& path, std::vector<int64_t>* shape);

}  // namespace qk::data::npy
