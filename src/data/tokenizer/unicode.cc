#include "tokenizer/unicode.h"

#include <map>
#include <vector>

namespace qk::data::unicode {
namespace {

struct Range {
  uint32_t first, last;
  Cat cat;
};
constexpr Range kRanges[] = {
#include "tokenizer/unicode_tables.inc"
};

// Two-level table: 4352 blocks of 256 code points, identical blocks shared.
// Built once; 17 KiB of block indices plus a few hundred unique blocks.
struct Table {
  std::vector<uint16_t> block_of;         // code point >> 8 -> block
  std::vector<std::array<Cat, 256>> blocks;
  Table() {
    std::vector<Cat> flat(0x110000, kOther);
    for (const Range& r : kRanges)
      for (uint32_t c = r.first; c <= r.last; ++c) flat[c] = r.cat;
    block_of.resize(0x110000 >> 8);
    std::map<std::array<Cat, 256>, size_t> seen;
    for (uint32_t b = 0; b < block_of.size(); ++b) {
      std::array<Cat, 256> blk;
      for (int i = 0; i < 256; ++i) blk[i] = flat[(b << 8) + i];
      auto [it, added] = seen.emplace(blk, blocks.size());
      if (added) blocks.push_back(blk);
      block_of[b] = static_cast<uint16_t>(it->second);
    }
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

Cat category(uint32_t cp) {
  if (cp >= 0x110000) return kOther;  // malformed byte
  const Table& t = table();
  return t.blocks[t.block_of[cp >> 8]][cp & 0xFF];
}

bool valid_utf8(std::string_view s, size_t* bad_offset) {
  auto* p = reinterpret_cast<const unsigned char*>(s.data());
  auto* end = p + s.size();
  const auto* begin = p;
  while (p < end) {
    if (*p < 0x80) { ++p; continue; }
    uint32_t cp;
    int n = decode_utf8(p, end, &cp);
    if (cp >= 0x110000) {
      if (bad_offset) *bad_offset = static_cast<size_t>(p - begin);
      return false;
    }
    p += n;
  }
  return true;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {
struct ByteMap {
  std::array<uint16_t, 256> to_cp{};
  std::array<int16_t, 512> to_byte{};
  ByteMap() {
    to_byte.fill(-1);
    std::array<bool, 256> printable{};
    for (int b = '!'; b <= '~'; ++b) printable[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
    int n = 0;
    for (int b = 0; b < 256; ++b) to_cp[b] = static_cast<uint16_t>(printable[b] ? b : 256 + n++);
    for (int b = 0; b < 256; ++b) to_byte[to_cp[b]] = static_cast<int16_t>(b);
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}
}  // namespace

const std::array<uint16_t, 256>& byte_to_cp() { return byte_map().to_cp; }

int cp_to_byte(uint32_t cp) { return cp < 512 ? byte_map().to_byte[cp] : -1; }

}  // namespace qk::data::unicode
