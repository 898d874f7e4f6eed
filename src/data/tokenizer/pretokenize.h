// Pre-tokenizers: split text into the pieces BPE runs on, as the regexes of
// GPT-2 and Llama-3 (cl100k-style) do, hand-written because a regex engine
// with \p{L} and lookahead is both slow and not in the standard library.
// See Note [split patterns] in pretokenize.cc.
#pragma once

#include <cstddef>
#include <string_view>
#include <utility>
#include <vector>

namespace qk::data {

enum class SplitPattern {
  kGpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,  // (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|...
  kNone,    // the whole text is one piece
};

// The regex strings as they appear in tokenizer.json / tiktoken definitions.
extern const char* const kGpt2Regex;
extern const char* const kLlama3Regex;

// Recognises a tokenizer.json Split regex; throws ValueError naming the
// pattern when it is not one of the supported ones.
SplitPattern split_pattern_from_regex(std::string_view regex);
const char* split_pattern_name(SplitPattern p);

// Appends (offset, length) of every piece of `text` to `out`, in order;
// the pieces cover the text exactly.
void split_pieces(SplitPattern p, std::string_view text,
                  std::vector<std::pair<size_t, size_t>>& out);

}  // namespace qk::data
