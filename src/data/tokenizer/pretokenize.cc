// Note [split patterns]
// Each alternative of the regex is tried left to right at the current
// position and the first that matches wins (regex alternation is ordered,
// not longest-match). Quantifiers are greedy; the only backtracking that
// changes a result is in the whitespace rules:
//   \s+(?!\S)  a whitespace run followed by a non-space keeps its last
//              character for the next piece (so " world" gets its space);
//              a run of one such character falls through to \s+.
//   \s*[\r\n]+ (Llama-3) the run up to and including its last newline.
// The character classes are JavaScript's (tools/gen_unicode_tables.js), the
// engine js-tiktoken uses; Oniguruma (Hugging Face) differs only in \s for
// U+001C..U+001F and U+0085. Malformed UTF-8 bytes count as "other".
#include "tokenizer/pretokenize.h"

#include "tokenizer/unicode.h"
#include "qk/base/error.h"

namespace qk::data {
namespace {

using unicode::Cat;

// The class of the code point at i and its length; ASCII without a call.
struct Cursor {
  const unsigned char* s;
  const unsigned char* end;
  static constexpr Cat kAscii[128] = {
      // 0x00-0x1F: \t \n \v \f \r are spaces
      Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther,
      Cat::kOther, Cat::kOther, Cat::kSpace, Cat::kSpace, Cat::kSpace, Cat::kSpace, Cat::kSpace,
      Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther,
      Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther,
      Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther,
      // 0x20 space, then punctuation, digits 0x30-0x39
      Cat::kSpace, Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther,
      Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther,
      Cat::kOther, Cat::kOther, Cat::kNumber, Cat::kNumber, Cat::kNumber, Cat::kNumber,
      Cat::kNumber, Cat::kNumber, Cat::kNumber, Cat::kNumber, Cat::kNumber, Cat::kNumber,
      Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther, Cat::kOther,
      // 0x40 @, A-Z, [ \ ] ^ _
      Cat::kOther, Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter,
      Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter,
      Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter,
      Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter,
      Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kOther, Cat::kOther, Cat::kOther,
      Cat::kOther, Cat::kOther,
      // 0x60 `, a-z, { | } ~ DEL
      Cat::kOther, Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter,
      Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter,
      Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter,
      Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kLetter,
      Cat::kLetter, Cat::kLetter, Cat::kLetter, Cat::kOther, Cat::kOther, Cat::kOther,
      Cat::kOther, Cat::kOther};

  // Class and byte length of the code point at p (p < end).
  Cat at(const unsigned char* p, int* len, uint32_t* cp_out = nullptr) const {
    if (*p < 0x80) {
      *len = 1;
      if (cp_out) *cp_out = *p;
      return kAscii[*p];
    }
    uint32_t cp;
    *len = unicode::decode_utf8(p, end, &cp);
    if (cp_out) *cp_out = cp;
    return unicode::category(cp);
  }
  // Advances past code points of class `c` (or, when negate, of any class
  // but kSpace/kLetter/kNumber); returns the new position.
  const unsigned char* skip(const unsigned char* p, Cat c) const {
    int n;
    while (p < end && at(p, &n) == c) p += n;
    return p;
  }
  const unsigned char* skip_other(const unsigned char* p) const { return skip(p, Cat::kOther); }
  bool is(const unsigned char* p, Cat c) const {
    int n;
    return p < end && at(p, &n) == c;
  }
};

bool is_newline(const unsigned char* p, const unsigned char* end) {
  return p < end && (*p == '\r' || *p == '\n');
}

// 's 't 're 've 'm 'll 'd after an apostrophe at p; returns the length or 0.
size_t contraction(const unsigned char* p, const unsigned char* end, bool ignore_case) {
  if (*p != '\'' || end - p < 2) return 0;
  auto lower = [&](unsigned char c) -> unsigned char {
    return ignore_case && c >= 'A' && c <= 'Z' ? static_cast<unsigned char>(c + 32) : c;
  };
  const unsigned char a = lower(p[1]);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (end - p >= 3) {
    const unsigned char b = lower(p[2]);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

// \s+(?!\S)|\s+ at p (p is whitespace): the run, less its last character
// when a non-space follows and the run has more than one character.
const unsigned char* whitespace_run(const Cursor& c, const unsigned char* p) {
  const unsigned char* last = p;
  const unsigned char* q = p;
  int n;
  while (q < c.end && c.at(q, &n) == Cat::kSpace) {
    last = q;
    q += n;
  }
  if (q < c.end && last > p) return last;
  return q;
}

size_t gpt2_piece(const Cursor& c, const unsigned char* p) {
  if (size_t k = contraction(p, c.end, false)) return k;
  const unsigned char* q = p;
  int n;
  // ` ?X+` for X in letters, numbers, others: the optional space binds to
  // whatever class follows it, if that class is not whitespace.
  if (*q == ' ' && q + 1 < c.end) {
    Cat next = c.at(q + 1, &n);
    if (next != Cat::kSpace) return static_cast<size_t>(c.skip(q + 1, next) - p);
  }
  Cat cat = c.at(q, &n);
  if (cat != Cat::kSpace) return static_cast<size_t>(c.skip(q, cat) - p);
  return static_cast<size_t>(whitespace_run(c, p) - p);
}

size_t llama3_piece(const Cursor& c, const unsigned char* p) {
  if (size_t k = contraction(p, c.end, true)) return k;
  int n;
  Cat cat = c.at(p, &n);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (cat == Cat::kLetter) return static_cast<size_t>(c.skip(p, Cat::kLetter) - p);
  if (!is_newline(p, c.end) && cat != Cat::kNumber && c.is(p + n, Cat::kLetter))
    return static_cast<size_t>(c.skip(p + n, Cat::kLetter) - p);
  // \p{N}{1,3}
  if (cat == Cat::kNumber) {
    const unsigned char* q = p;
    for (int k = 0; k < 3 && q < c.end; ++k) {
      int m;
      if (c.at(q, &m) != Cat::kNumber) break;
      q += m;
    }
    return static_cast<size_t>(q - p);
  }
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  const unsigned char* q = p;
  if (*q == ' ' && c.is(q + 1, Cat::kOther)) ++q;
  if (c.is(q, Cat::kOther)) {
    q = c.skip_other(q);
    while (is_newline(q, c.end)) ++q;
    return static_cast<size_t>(q - p);
  }
  // Whitespace: `\s*[\r\n]+` (to the last newline of the run), else as GPT-2.
  const unsigned char* last_nl = nullptr;
  q = p;
  while (q < c.end && c.at(q, &n) == Cat::kSpace) {
    if (*q == '\r' || *q == '\n') last_nl = q;
    q += n;
  }
  if (last_nl) return static_cast<size_t>(last_nl + 1 - p);
  return static_cast<size_t>(whitespace_run(c, p) - p);
}

}  // namespace

const char* const kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char* const kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

SplitPattern split_pattern_from_regex(std::string_view regex) {
  if (regex == kGpt2Regex) return SplitPattern::kGpt2;
  if (regex == kLlama3Regex) return SplitPattern::kLlama3;
  QK_THROW(ValueError, "unsupported pre-tokenizer split regex '", regex,
           "'; supported: the GPT-2 pattern '", kGpt2Regex, "' and the Llama-3 pattern '",
           kLlama3Regex, "'");
}

const char* split_pattern_name(SplitPattern p) {
  switch (p) {
    case SplitPattern::kGpt2: return "GPT-2";
    case SplitPattern::kLlama3: return "Llama-3";
    case SplitPattern::kNone: return "none";
  }
  return "?";
}

void split_pieces(SplitPattern pat, std::string_view text,
                  std::vector<std::pair<size_t, size_t>>& out) {
  auto* begin = reinterpret_cast<const unsigned char*>(text.data());
  Cursor c{begin, begin + text.size()};
  if (pat == SplitPattern::kNone) {
    if (!text.empty()) out.emplace_back(0, text.size());
    return;
  }
  const unsigned char* p = begin;
  while (p < c.end) {
    size_t n = pat == SplitPattern::kGpt2 ? gpt2_piece(c, p) : llama3_piece(c, p);
    QK_INTERNAL_ASSERT(n > 0 && n <= static_cast<size_t>(c.end - p), "split made no progress");
    out.emplace_back(static_cast<size_t>(p - begin), n);
    p += n;
  }
}

}  // namespace qk::data
