// A tiny GPT-2 byte-level BPE tokenizer (vocab.json + merges.txt) written by
// the tests that need real text: `qk generate`, `qk checkpoint export` and
// the pretrain -> generate/export/fine-tune loop.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qk/base/file_io.h"

namespace qk::test {

inline std::string utf8_of_code_point(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's vocab.json/merges.txt format: the 256 bytes as GPT-2's
// bytes_to_unicode characters, 43 merges, <|endoftext|> last: 300 ids, the
// fixtures' vocab_size, with EOD 299 (their eos_token_id).
inline void write_tiny_gpt2_tokenizer(const std::string& dir, const std::vector<std::string>& extra_merges = {}) {
  std::vector<uint32_t> bytes, chars;
  for (uint32_t b = '!'; b <= '~'; ++b) bytes.push_back(b);
  for (uint32_t b = 0xA1; b <= 0xAC; ++b) bytes.push_back(b);
  for (uint32_t b = 0xAE; b <= 0xFF; ++b) bytes.push_back(b);
  chars = bytes;
  for (uint32_t b = 0, n = 0; b < 256; ++b)
    if (std::find(bytes.begin(), bytes.end(), b) == bytes.end()) {
      bytes.push_back(b);
      chars.push_back(256 + n++);
    }
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < chars.size(); ++i) vocab[utf8_of_code_point(chars[i])] = i;
  const std::vector<std::string> merges = {
      "Ġ t", "h e", "Ġt he", "i n", "e r", "a n", "o n", "r e", "e d", "Ġ a", "Ġ s", "Ġ w", "o u", "in g", "Ġ o",
      "Ġ c", "a t", "e n",   "i s", "o r", "Ġ b", "Ġ f", "Ġ m", "i t", "a l", "a r", "l e", "Ġ p", "Ġ d",  "e s",
      "Ġ h", "Ġ i", "o f",   "Ġ l", "Ġ n", "Ġ g", "Ġ e", "Ġ u", "Ġ r", "Ġ y", "s t", "c h", "l l"};
  std::string text = "#version: 0.2\n";
  std::vector<std::string> all = merges;
  all.insert(all.end(), extra_merges.begin(), extra_merges.end());
  for (const auto& m : all) {
    const size_t sp = m.find(' ');
    vocab[m.substr(0, sp) + m.substr(sp + 1)] = vocab.size();
    text += m + "\n";
  }
  vocab["<|endoftext|>"] = vocab.size();
  ASSERT_EQ(vocab.size(), 300u + extra_merges.size());
  qk::atomic_write_file(dir + "/vocab.json", vocab.dump());
  qk::atomic_write_file(dir + "/merges.txt", text);
}

}  // namespace qk::test
