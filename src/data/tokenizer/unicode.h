// Unicode pieces the byte-level tokenizers need: UTF-8 decoding that never
// fails, the letter/number/space classes of the split regexes, and GPT-2's
// byte <-> printable-character mapping.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace qk::data::unicode {

enum Cat : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

// The regex class of a code point (\p{L}, \p{N}, \s as JavaScript defines them).
Cat category(uint32_t cp);

// Decodes one code point at p (p < end). Returns its byte length; a malformed
// or truncated sequence decodes as the single byte (cp = 0xFFFD-like marker
// 0x110000 + byte), length 1, so invalid input is split, never rejected here.
inline int decode_utf8(const unsigned char* p, const unsigned char* end, uint32_t* cp) {
  const unsigned c = p[0];
  if (c < 0x80) { *cp = c; return 1; }
  int n;
  uint32_t v;
  if (c >= 0xC2 && c <= 0xDF) { n = 2; v = c & 0x1F; }
  else if (c >= 0xE0 && c <= 0xEF) { n = 3; v = c & 0x0F; }
  else if (c >= 0xF0 && c <= 0xF4) { n = 4; v = c & 0x07; }
  else { *cp = 0x110000 + c; return 1; }
  if (end - p < n) { *cp = 0x110000 + c; return 1; }
  for (int i = 1; i < n; ++i) {
    if ((p[i] & 0xC0) != 0x80) { *cp = 0x110000 + c; return 1; }
    v = (v << 6) | (p[i] & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are malformed.
  if ((n == 3 && v < 0x800) || (n == 4 && (v < 0x10000 || v > 0x10FFFF)) ||
      (v >= 0xD800 && v <= 0xDFFF)) {
    *cp = 0x110000 + c;
    return 1;
  }
  *cp = v;
  return n;
}

// True when s is well-formed UTF-8; *bad_offset gets the first bad byte.
bool valid_utf8(std::string_view s, size_t* bad_offset = nullptr);

void append_utf8(std::string& out, uint32_t cp);

// GPT-2's bytes_to_unicode(): byte b is written as code point byte_to_cp()[b]
// in vocab.json/merges.txt/tokenizer.json.
const std::array<uint16_t, 256>& byte_to_cp();
// Inverse: code point (< 324) -> byte, or -1.
int cp_to_byte(uint32_t cp);

}  // namespace qk::data::unicode
