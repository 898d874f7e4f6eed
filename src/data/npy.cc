#include "npy.h"

#include <fmt/format.h>

#include <cstring>

#include "qk/base/error.h"
#include "qk/base/file_io.h"

namespace qk::data::npy {
namespace {

std::string header(const char* descr, const std::vector<int64_t>& shape) {
  std::string s = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': (", descr);
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", shape[i], shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
  s += "), }";
  // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
  const size_t total = 10 + s.size() + 1;
  s.append((64 - total % 64) % 64, ' ');
  s += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  const uint16_t n = static_cast<uint16_t>(s.size());
  out += static_cast<char>(n & 0xff);
  out += static_cast<char>(n >> 8);
  return out + s;
}

template <typename T>
void save(const std::string& path, const char* descr, const std::vector<T>& data, const std::vector<int64_t>& shape) {
  std::string out = header(descr, shape);
  out.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(T));
  atomic_write_file(path, out);
}

template <typename T>
std::vector<T> load(const std::string& path, const char* descr, std::vector<int64_t>* shape) {
  const std::string f = read_file(path);
  QK_CHECK_AS(IoError, f.size() >= 10 && f.compare(0, 6, "\x93NUMPY") == 0 && f[6] == 1, "'", path,
              "' is not a version-1 .npy file");
  const size_t hlen = static_cast<unsigned char>(f[8]) | (static_cast<size_t>(static_cast<unsigned char>(f[9])) << 8);
  QK_CHECK_AS(IoError, f.size() >= 10 + hlen, "'", path, "' is truncated in its header");
  const std::string h = f.substr(10, hlen);
  QK_CHECK_AS(IoError, h.find(fmt::format("'descr': '{}'", descr)) != std::string::npos &&
                           h.find("'fortran_order': False") != std::string::npos,
              "'", path, "' does not hold ", descr, " data in C order: ", h);
  const size_t lp = h.find("'shape': ("), rp = h.find(')', lp);
  QK_CHECK_AS(IoError, lp != std::string::npos && rp != std::string::npos, "'", path, "': no shape in header");
  shape->clear();
  int64_t count = 1;
  for (size_t p = lp + 10; p < rp;) {
    while (p < rp && (h[p] == ' ' || h[p] == ',')) ++p;
    if (p >= rp) break;
    char* end = nullptr;
    const long long v = std::strtoll(h.c_str() + p, &end, 10);
    QK_CHECK_AS(IoError, end != h.c_str() + p && v >= 0, "'", path, "': bad shape in header: ", h);
    shape->push_back(v);
    count *= v;
    p = static_cast<size_t>(end - h.c_str());
  }
  const size_t bytes = f.size() - 10 - hlen;
  QK_CHECK_AS(IoError, bytes == static_cast<size_t>(count) * sizeof(T), "'", path, "' holds ", bytes,
              " data bytes but its shape needs ", count * static_cast<int64_t>(sizeof(T)));
  std::vector<T> out(static_cast<size_t>(count));
  if (!out.empty()) std::memcpy(out.data(), f.data() + 10 + hlen, bytes);
  return out;
}

}  // namespace

void save_i32(const std::string& path, const std::vector<int32_t>& data, std::vector<int64_t> shape) {
  save(path, "<i4", data, shape);
}
void save_i64(const std::string& path, const std::vector<int64_t>& data, std::vector<int64_t> shape) {
  save(path, "<i8", data, shape);
}
std::vector<int32_t> load_i32(const std::string& path, std::vector<int64_t>* shape) {
  return load<int32_t>(path, "<i4", shape);
}
std::vector<int64_t> load_i64(const std::string& path, std::vector<int64_t>* shape) {
  return load<int64_t>(path, "<i8", shape);
}

}  // namespace qk::data::npy
