// XDR (RFC 4506) as GROMACS's files use it: 4-byte big-endian items, doubles
// as 8 bytes, strings as GROMACS's gmx_fio_do_string writes them, opaque bytes
// padded to 4. For .trr and .xtc (trr.cc, xtc.cc).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "qk/base/error.h"
#include "qk/base/log.h"

namespace qk::md {

class XdrOut {
 public:
  void i32(int32_t v) { u32(static_cast<uint32_t>(v)); }
  void u32(uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) bytes_.push_back(static_cast<char>(v >> s & 0xff));
  }
  void f32(float v) { u32(std::bit_cast<uint32_t>(v)); }
  void real(double v, bool dbl) {
    if (!dbl) return f32(static_cast<float>(v));
    const uint64_t b = std::bit_cast<uint64_t>(v);
    u32(static_cast<uint32_t>(b >> 32));
    u32(static_cast<uint32_t>(b));
  }
  // gmx_fio_do_string: the length with its terminator, then xdr_string (length, bytes padded to 4).
  void string(const char* s) {
    const auto n = static_cast<int32_t>(std::strlen(s));
    i32(n + 1);
    i32(n);
    opaque(s, n);
  }
  void opaque(const void* p, size_t n) {
    bytes_.append(static_cast<const char*>(p), n);
    bytes_.append((4 - n % 4) % 4, '\0');
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

class XdrIn {
 public:
  XdrIn(const std::string& data, const std::string& path) : d_(data), path_(path) {}
  bool done() const { return pos_ >= d_.size(); }
  size_t pos() const { return pos_; }
  uint32_t u32(const char* what) {
    need(4, what);
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) v = v << 8 | static_cast<unsigned char>(d_[pos_ + k]);
    pos_ += 4;
    return v;
  }
  int32_t i32(const char* what) { return static_cast<int32_t>(u32(what)); }
  float f32(const char* what) { return std::bit_cast<float>(u32(what)); }
  double real(bool dbl, const char* what) {
    if (!dbl) return f32(what);
    const uint64_t hi = u32(what), lo = u32(what);
    return std::bit_cast<double>(hi << 32 | lo);
  }
  std::string string(const char* what) {
    const int32_t with_nul = i32(what), n = i32(what);
    QK_CHECK(n >= 0 && n + 1 == with_nul, path_, ": bad string at byte ", pos_, " (", what, ")");
    return opaque(static_cast<size_t>(n), what);
  }
  std::string opaque(size_t n, const char* what) {
    need(n, what);
    std::string s = d_.substr(pos_, n);
    pos_ += n + (4 - n % 4) % 4;
    return s;
  }

 private:
  // Reading past the end is an IoError (a file cut short, as by a run killed mid-write); anything else
  // malformed is a ValueError: readers drop an incomplete last frame and refuse a corrupt one.
  void need(size_t n, const char* what) const {
    QK_CHECK_AS(::qk::IoError, pos_ + n <= d_.size(), path_, ": truncated at byte ", pos_, " reading ", what);
  }
  const std::string& d_;
  std::string path_;
  size_t pos_ = 0;
};

// Runs read_frame() until the data ends; a last frame cut short is dropped with a warning naming the file
// and where it starts (the whole frames before it are returned), as GROMACS's tools do.
template <typename ReadFrame>
void read_frames(XdrIn& in, const std::string& path, const char* kind, ReadFrame read_frame) {
  for (size_t n = 0; !in.done(); ++n) {
    const size_t start = in.pos();
    try {
      read_frame(start);
    } catch (const ::qk::IoError& e) {
      QK_WARN("{}: the {} frame at byte {} is incomplete (a run stopped while writing it?): read the {} whole "
              "frames before it ({})", path, kind, start, n, e.message());
      return;
    }
  }
}

}  // namespace qk::md
