// The .xtc format: GROMACS's xtcio.cpp frame around libxdrf's xdr3dfcoord
// coordinate packing, written here from its description (xtc.h); the integer
// arithmetic, rounding and bit order follow it exactly so that the bytes
// match GROMACS's.
#include "qk/hpc/md/xtc.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <iterator>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "xdr.h"

namespace qk::md {
namespace {

constexpr int32_t kXtcMagic = 1995;

// Radices for a run's small differences: about 2^(k/3) apart, so one step of the index is a third of a bit.
constexpr int32_t kMagicInts[] = {
    0,       0,       0,       0,       0,       0,       0,       0,       0,        8,        10,
    12,      16,      20,      25,      32,      40,      50,      64,      80,       101,      128,
    161,     203,     256,     322,     406,     512,     645,     812,     1024,     1290,     1625,
    2048,    2580,    3250,    4096,    5060,    6501,    8192,    10321,   13003,    16384,    20642,
    26007,   32768,   41285,   52015,   65536,   82570,   104031,  131072,  165140,   208063,   262144,
    330280,  416127,  524287,  660561,  832255,  1048576, 1321122, 1664510, 2097152,  2642245,  3329021,
    4194304, 5284491, 6658042, 8388607, 10568983, 13316085, 16777216};
constexpr int kFirstIdx = 9;
constexpr int kLastIdx = static_cast<int>(std::size(kMagicInts));
int32_t magic(int k) { return kMagicInts[std::clamp(k, 0, kLastIdx - 1)]; }

// Bits needed for values below `size` (libxdrf's sizeofint).
int bits_for(uint32_t size) {
  uint32_t num = 1;
  int bits = 0;
  while (size >= num && bits < 32) {
    ++bits;
    num <<= 1;
  }
  return bits;
}

// number = number * size + add, on a little-endian multibyte number of *nbytes bytes (one per uint32).
void multiply_add(uint32_t bytes[], uint32_t* nbytes, uint32_t size, uint32_t add) {
  uint32_t tmp = add, b = 0;
  for (; b < *nbytes; ++b) {
    tmp = bytes[b] * size + tmp;
    bytes[b] = tmp & 0xff;
    tmp >>= 8;
  }
  while (tmp != 0) {
    bytes[b++] = tmp & 0xff;
    tmp >>= 8;
  }
  *nbytes = b;
}

// Bits needed for three values packed in mixed radix sizes[0..2] (sizeofints).
int bits_for_product(const uint32_t sizes[3]) {
  uint32_t bytes[32] = {1};
  uint32_t nbytes = 1;
  for (int i = 0; i < 3; ++i) multiply_add(bytes, &nbytes, sizes[i], 0);
  uint32_t num = 1;
  int bits = 0;
  --nbytes;
  while (bytes[nbytes] >= num) {
    ++bits;
    num *= 2;
  }
  return bits + static_cast<int>(nbytes) * 8;
}

// Appends bits most significant first, as libxdrf's encodebits (its state: bytes done, bits pending).
class BitWriter {
 public:
  void put(int nbits, uint32_t num) {
    reserve();
    while (nbits >= 8) {
      last_ = (last_ << 8) | (num >> (nbits - 8));
      bytes_[count_++] = static_cast<uint8_t>(last_ >> pending_);
      nbits -= 8;
      reserve();
    }
    if (nbits > 0) {
      last_ = (last_ << nbits) | num;
      pending_ += nbits;
      if (pending_ >= 8) {
        pending_ -= 8;
        bytes_[count_++] = static_cast<uint8_t>(last_ >> pending_);
      }
    }
    reserve();
    if (pending_ > 0) bytes_[count_] = static_cast<uint8_t>(last_ << (8 - pending_));
  }
  // Three values below sizes[] as one mixed-radix number in nbits (encodeints).
  void put_ints(int nbits, const uint32_t sizes[3], const uint32_t nums[3]) {
    uint32_t bytes[32];
    uint32_t nbytes = 0, tmp = nums[0];
    do {
      bytes[nbytes++] = tmp & 0xff;
      tmp >>= 8;
    } while (tmp != 0);
    for (int i = 1; i < 3; ++i) {
      QK_CHECK(nums[i] < sizes[i], "xtc: internal error packing ", nums[i], " below ", sizes[i]);
      multiply_add(bytes, &nbytes, sizes[i], nums[i]);
    }
    if (nbits >= static_cast<int>(nbytes) * 8) {
      for (uint32_t i = 0; i < nbytes; ++i) put(8, bytes[i]);
      put(nbits - static_cast<int>(nbytes) * 8, 0);
    } else {
      for (uint32_t i = 0; i + 1 < nbytes; ++i) put(8, bytes[i]);
      put(nbits - static_cast<int>(nbytes - 1) * 8, bytes[nbytes - 1]);
    }
  }
  // The bytes written, the pending partial byte included.
  std::string bytes() const {
    return std::string(reinterpret_cast<const char*>(bytes_.data()), count_ + (pending_ != 0 ? 1 : 0));
  }

 private:
  void reserve() {
    if (bytes_.size() < count_ + 2) bytes_.resize(2 * bytes_.size() + 64);
  }
  std::vector<uint8_t> bytes_;
  size_t count_ = 0;
  int pending_ = 0;
  uint32_t last_ = 0;
};

class BitReader {
 public:
  BitReader(const std::string& bytes, const std::string& where) : b_(bytes), where_(where) {}
  uint32_t get(int nbits) {
    const uint32_t mask = nbits >= 32 ? ~0u : (1u << nbits) - 1;
    uint32_t num = 0;
    while (nbits >= 8) {
      last_ = (last_ << 8) | next();
      num |= (last_ >> pending_) << (nbits - 8);
      nbits -= 8;
    }
    if (nbits > 0) {
      if (pending_ < nbits) {
        pending_ += 8;
        last_ = (last_ << 8) | next();
      }
      pending_ -= nbits;
      num |= (last_ >> pending_) & ((1u << nbits) - 1);
    }
    return num & mask;
  }
  void get_ints(int nbits, const uint32_t sizes[3], int32_t nums[3]) {
    uint32_t bytes[32] = {};
    int nbytes = 0;
    while (nbits > 8) {
      bytes[nbytes++] = get(8);
      nbits -= 8;
    }
    if (nbits > 0) bytes[nbytes++] = get(nbits);
    for (int i = 2; i > 0; --i) {
      uint32_t num = 0;
      for (int j = nbytes - 1; j >= 0; --j) {
        num = (num << 8) | bytes[j];
        const uint32_t p = num / sizes[i];
        bytes[j] = p;
        num -= p * sizes[i];
      }
      nums[i] = static_cast<int32_t>(num);
    }
    nums[0] = static_cast<int32_t>(bytes[0] | (bytes[1] << 8) | (bytes[2] << 16) | (bytes[3] << 24));
  }

 private:
  uint32_t next() {
    QK_CHECK(pos_ < b_.size(), where_, ": compressed coordinates end early");
    return static_cast<unsigned char>(b_[pos_++]);
  }
  const std::string& b_;
  std::string where_;
  size_t pos_ = 0;
  int pending_ = 0;
  uint32_t last_ = 0;
};

// libxdrf's rounding: float product, +-0.5 in double, back to float, truncated.
int32_t to_grid(double coordinate, float precision) {
  const float xf = static_cast<float>(coordinate);
  const float prod = xf * precision;
  const float lf = static_cast<float>(xf >= 0 ? prod + 0.5 : prod - 0.5);
  QK_CHECK(std::fabs(lf) <= static_cast<float>(INT_MAX - 2), "xtc: coordinate ", coordinate,
           " nm times the precision ", precision, " overflows the integer grid");
  return static_cast<int32_t>(lf);
}

void encode_coordinates(const std::vector<Vec3>& x, float precision, XdrOut* o) {
  const int n = static_cast<int>(x.size());
  o->i32(n);
  if (n <= 9) {  // not worth compressing
    for (const Vec3& p : x)
      for (double c : p) o->f32(static_cast<float>(c));
    return;
  }
  o->f32(precision);
  std::vector<int32_t> q(static_cast<size_t>(3) * n);
  int32_t minint[3] = {INT_MAX, INT_MAX, INT_MAX}, maxint[3] = {INT_MIN, INT_MIN, INT_MIN};
  int32_t mindiff = INT_MAX;
  for (int a = 0; a < n; ++a) {
    for (int d = 0; d < 3; ++d) {
      const int32_t v = to_grid(x[a][d], precision);
      q[3 * a + d] = v;
      minint[d] = std::min(minint[d], v);
      maxint[d] = std::max(maxint[d], v);
    }
    if (a > 0) {
      const int32_t diff = std::abs(q[3 * a] - q[3 * a - 3]) + std::abs(q[3 * a + 1] - q[3 * a - 2]) +
                           std::abs(q[3 * a + 2] - q[3 * a - 1]);
      mindiff = std::min(mindiff, diff);
    }
  }
  for (int32_t v : minint) o->i32(v);
  for (int32_t v : maxint) o->i32(v);
  for (int d = 0; d < 3; ++d)
    QK_CHECK(static_cast<float>(maxint[d]) - static_cast<float>(minint[d]) < static_cast<float>(INT_MAX - 2),
             "xtc: the positions span too far for the integer grid at precision ", precision);
  uint32_t sizeint[3], bitsizeint[3] = {0, 0, 0};
  for (int d = 0; d < 3; ++d) sizeint[d] = static_cast<uint32_t>(maxint[d] - minint[d]) + 1;
  int bitsize = 0;  // 0: each coordinate in its own bit count (sizes too large to multiply)
  if ((sizeint[0] | sizeint[1] | sizeint[2]) > 0xffffff) {
    for (int d = 0; d < 3; ++d) bitsizeint[d] = static_cast<uint32_t>(bits_for(sizeint[d]));
  } else {
    bitsize = bits_for_product(sizeint);
  }
  int smallidx = kFirstIdx;
  while (smallidx < kLastIdx && kMagicInts[smallidx] < mindiff) ++smallidx;
  o->i32(smallidx);
  const int maxidx = std::min(kLastIdx, smallidx + 8), minidx = maxidx - 8;
  int32_t smaller = magic(std::max(kFirstIdx, smallidx - 1)) / 2, smallnum = magic(smallidx) / 2;
  uint32_t sizesmall[3];
  std::fill(sizesmall, sizesmall + 3, static_cast<uint32_t>(magic(smallidx)));
  const int32_t larger = magic(maxidx) / 2;
  BitWriter bits;
  int32_t prev[3] = {0, 0, 0};
  int prevrun = -1;
  int i = 0;
  while (i < n) {
    int32_t* c = &q[3 * static_cast<size_t>(i)];
    int is_smaller;
    if (smallidx < maxidx && i >= 1 && std::abs(c[0] - prev[0]) < larger && std::abs(c[1] - prev[1]) < larger &&
        std::abs(c[2] - prev[2]) < larger) {
      is_smaller = 1;
    } else if (smallidx > minidx) {
      is_smaller = -1;
    } else {
      is_smaller = 0;
    }
    bool is_small = false;
    if (i + 1 < n && std::abs(c[0] - c[3]) < smallnum && std::abs(c[1] - c[4]) < smallnum &&
        std::abs(c[2] - c[5]) < smallnum) {
      // Swap the atom with the next (a water's O with its first H): the run then starts closer.
      for (int d = 0; d < 3; ++d) std::swap(c[d], c[3 + d]);
      is_small = true;
    }
    const uint32_t rel[3] = {static_cast<uint32_t>(c[0] - minint[0]), static_cast<uint32_t>(c[1] - minint[1]),
                             static_cast<uint32_t>(c[2] - minint[2])};
    if (bitsize == 0) {
      for (int d = 0; d < 3; ++d) bits.put(static_cast<int>(bitsizeint[d]), rel[d]);
    } else {
      bits.put_ints(bitsize, sizeint, rel);
    }
    std::copy(c, c + 3, prev);
    ++i;
    int run = 0;
    uint32_t tmp[30];
    if (!is_small && is_smaller == -1) is_smaller = 0;
    while (is_small && run < 8 * 3) {
      const int32_t* t = &q[3 * static_cast<size_t>(i)];
      int32_t sum = 0;
      for (int d = 0; d < 3; ++d) sum += (t[d] - prev[d]) * (t[d] - prev[d]);
      if (is_smaller == -1 && sum >= smaller * smaller) is_smaller = 0;
      for (int d = 0; d < 3; ++d) tmp[run++] = static_cast<uint32_t>(t[d] - prev[d] + smallnum);
      std::copy(t, t + 3, prev);
      ++i;
      is_small = i < n && std::abs(q[3 * i] - prev[0]) < smallnum && std::abs(q[3 * i + 1] - prev[1]) < smallnum &&
                 std::abs(q[3 * i + 2] - prev[2]) < smallnum;
    }
    if (run != prevrun || is_smaller != 0) {
      prevrun = run;
      bits.put(1, 1);  // the run length changes
      bits.put(5, static_cast<uint32_t>(run + is_smaller + 1));
    } else {
      bits.put(1, 0);
    }
    for (int k = 0; k < run; k += 3) bits.put_ints(smallidx, sizesmall, &tmp[k]);
    if (is_smaller != 0) {
      smallidx += is_smaller;
      if (is_smaller < 0) {
        smallnum = smaller;
        smaller = magic(smallidx - 1) / 2;
      } else {
        smaller = smallnum;
        smallnum = magic(smallidx) / 2;
      }
      std::fill(sizesmall, sizesmall + 3, static_cast<uint32_t>(magic(smallidx)));
    }
  }
  const std::string packed = bits.bytes();
  o->i32(static_cast<int32_t>(packed.size()));
  o->opaque(packed.data(), packed.size());
}

std::vector<Vec3> decode_coordinates(XdrIn& in, int natoms, float* precision, const std::string& where) {
  const int32_t n = in.i32("the coordinate count");
  QK_CHECK(n == natoms, where, ": ", n, " coordinates for a header of ", natoms, " atoms");
  std::vector<Vec3> x(natoms);
  if (n <= 9) {
    for (Vec3& p : x)
      for (double& c : p) c = in.f32("coordinates");
    return x;
  }
  *precision = in.f32("the precision");
  QK_CHECK(*precision > 0, where, ": precision ", *precision);
  int32_t minint[3], maxint[3];
  for (int32_t& v : minint) v = in.i32("the minimum");
  for (int32_t& v : maxint) v = in.i32("the maximum");
  uint32_t sizeint[3], bitsizeint[3] = {0, 0, 0};
  for (int d = 0; d < 3; ++d) sizeint[d] = static_cast<uint32_t>(maxint[d] - minint[d]) + 1;
  int bitsize = 0;
  if ((sizeint[0] | sizeint[1] | sizeint[2]) > 0xffffff) {
    for (int d = 0; d < 3; ++d) bitsizeint[d] = static_cast<uint32_t>(bits_for(sizeint[d]));
  } else {
    bitsize = bits_for_product(sizeint);
  }
  int smallidx = in.i32("the small index");
  QK_CHECK(smallidx >= kFirstIdx && smallidx < kLastIdx, where, ": small index ", smallidx);
  int32_t smaller = magic(std::max(kFirstIdx, smallidx - 1)) / 2, smallnum = magic(smallidx) / 2;
  uint32_t sizesmall[3];
  std::fill(sizesmall, sizesmall + 3, static_cast<uint32_t>(magic(smallidx)));
  const int32_t nbytes = in.i32("the packed length");
  QK_CHECK(nbytes >= 0, where, ": packed length ", nbytes);
  const std::string packed = in.opaque(static_cast<size_t>(nbytes), "the packed coordinates");
  BitReader bits(packed, where);
  const float inv = static_cast<float>(1.0 / *precision);
  int i = 0, run = 0;
  size_t out = 0;
  auto emit = [&](const int32_t c[3]) {
    QK_CHECK(out < x.size(), where, ": more coordinates packed than atoms");
    for (int d = 0; d < 3; ++d) x[out][d] = static_cast<float>(c[d] * inv);
    ++out;
  };
  while (i < n) {
    int32_t c[3], prev[3];
    if (bitsize == 0) {
      for (int d = 0; d < 3; ++d) c[d] = static_cast<int32_t>(bits.get(static_cast<int>(bitsizeint[d])));
    } else {
      bits.get_ints(bitsize, sizeint, c);
    }
    ++i;
    for (int d = 0; d < 3; ++d) prev[d] = c[d] += minint[d];
    int is_smaller = 0;
    if (bits.get(1) == 1) {
      run = static_cast<int>(bits.get(5));
      is_smaller = run % 3;
      run -= is_smaller;
      --is_smaller;
    }
    if (run > 0) {
      for (int k = 0; k < run; k += 3) {
        int32_t t[3];
        bits.get_ints(smallidx, sizesmall, t);
        ++i;
        for (int d = 0; d < 3; ++d) t[d] += prev[d] - smallnum;
        if (k == 0) {  // the writer swapped the first two atoms
          std::swap(t[0], prev[0]);
          std::swap(t[1], prev[1]);
          std::swap(t[2], prev[2]);
          emit(prev);
        } else {
          std::copy(t, t + 3, prev);
        }
        emit(t);
      }
    } else {
      emit(c);
    }
    smallidx += is_smaller;
    QK_CHECK(smallidx >= kFirstIdx && smallidx < kLastIdx, where, ": small index ", smallidx, " out of range");
    if (is_smaller < 0) {
      smallnum = smaller;
      smaller = smallidx > kFirstIdx ? magic(smallidx - 1) / 2 : 0;
    } else if (is_smaller > 0) {
      smaller = smallnum;
      smallnum = magic(smallidx) / 2;
    }
    std::fill(sizesmall, sizesmall + 3, static_cast<uint32_t>(magic(smallidx)));
  }
  QK_CHECK(out == x.size(), where, ": ", out, " coordinates unpacked for ", x.size(), " atoms");
  return x;
}

}  // namespace

std::string encode_xtc_frame(const XtcFrame& fr, float precision) {
  QK_CHECK(precision > 0, "xtc: precision must be positive, got ", precision);
  QK_CHECK(fr.x.size() <= static_cast<size_t>(INT_MAX / 3), "xtc: too many atoms (", fr.x.size(), ")");
  QK_CHECK(fr.step >= INT32_MIN && fr.step <= INT32_MAX, "xtc: step ", fr.step,
           " does not fit the .xtc header's 32-bit step");
  XdrOut o;
  o.i32(kXtcMagic);
  o.i32(static_cast<int32_t>(fr.x.size()));
  o.i32(static_cast<int32_t>(fr.step));
  o.f32(static_cast<float>(fr.time));
  for (const Vec3& row : fr.box)
    for (double c : row) o.f32(static_cast<float>(c));
  encode_coordinates(fr.x, precision, &o);
  return o.bytes();
}

namespace {
// The precision is checked before the file is created (or cut back).
const std::string& checked(const std::string& path, float precision) {
  QK_CHECK(precision > 0, "compressed-x-precision must be positive, got ", precision);
  return path;
}
}  // namespace

XtcWriter::XtcWriter(const std::string& path, float precision, std::optional<uint64_t> keep_bytes)
    : precision_(precision), file_(checked(path, precision), keep_bytes) {}

void XtcWriter::write(const XtcFrame& fr) {
  file_.write(encode_xtc_frame(fr, precision_));
}

std::vector<XtcFrame> read_xtc(const std::string& path) {
  const std::string data = read_file(path);
  XdrIn in(data, path);
  std::vector<XtcFrame> frames;
  read_frames(in, path, ".xtc", [&](size_t start) {
    const std::string where = path + ": frame " + std::to_string(frames.size()) + " at byte " + std::to_string(start);
    QK_CHECK(in.i32("the magic number") == kXtcMagic, where, ": not an .xtc frame (magic number is not 1995)");
    const int32_t natoms = in.i32("the atom count");
    QK_CHECK(natoms >= 0, where, ": negative atom count ", natoms);
    XtcFrame fr;
    fr.step = in.i32("the step");
    fr.time = in.f32("the time");
    for (Vec3& row : fr.box)
      for (double& c : row) c = in.f32("the box");
    fr.x = decode_coordinates(in, natoms, &fr.precision, where);
    frames.push_back(std::move(fr));
  });
  return frames;
}

}  // namespace qk::md
