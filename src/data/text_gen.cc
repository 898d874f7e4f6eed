#include "qk/data/text_gen.h"

#include <array>
#include <random>

#include "tokenizer/unicode.h"

namespace qk::data {
namespace {

constexpr const char* kWords[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "I", "this", "are", "or", "his", "from", "at", "which", "but", "have",
    "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has",
    "there", "been", "if", "more", "when", "will", "would", "who", "so", "no", "training",
    "model", "gradient", "tensor", "cluster", "throughput", "Megatron", "tokenizer", "GPU",
    "NVIDIA", "Moore", "Threads", "communication", "all-reduce", "pipeline", "parallelism",
    "optimizer", "checkpoint", "dataset", "benchmark", "accuracy", "learning", "rate",
    "batch", "sequence", "attention", "transformer", "embedding", "vocabulary", "QUICK",
    "Brown", "fox", "jumps", "lazy", "dog", "naïve", "café", "résumé", "façade", "coöperate",
    "Straße", "über", "jalapeño", "São", "Paulo", "Zürich", "Ångström", "fiancée"};
constexpr const char* kContractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T",
                                         "'RE", "'Ll", "'x", "'"};
constexpr const char* kPunct[] = {".", ",", "!", "?", ";", ":", "...", " -- ", "—", "(", ")",
                                  "\"", "'", "[", "]", "{", "}", "!!", "?!", "«", "»", "“", "”",
                                  "、", "。", "，", "@", "#", "$", "%", "^", "&", "*", "~", "`",
                                  "|", "\\", "/", "<", ">", "<|", "|>", "=", "+", "_"};
constexpr const char* kSpaces[] = {" ", "  ", "   ", "\t", "\n", "\n\n", "\n\n\n", "\r\n",
                                   " \n", "\n ", "\t\t", "    ", " \t ", "\xc2\xa0",
                                   "\xe3\x80\x80", "\xe2\x80\x83", "\x0b", "\x0c", "\xe2\x80\xa8",
                                   "\xef\xbb\xbf", "\x1c", "\xc2\x85"};
constexpr const char* kCode[] = {
    "for (int i = 0; i < n; ++i) {\n    y[i] += a * x[i];\n}\n",
    "def forward(self, x):\n\treturn self.proj(x) @ W.T  # shape [B, T, C]\n",
    "https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/datasets/gpt_dataset.py",
    "{\"text\": \"hello\", \"id\": 42, \"tags\": [\"a\", \"b\"]}",
    "0x7fffffff 0b1010 1e-6 3.14159 -2.5e+10 1,234,567.89 2024-06-01T12:00:00Z",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
    "<div class=\"row\"><span>&nbsp;</span></div>",
    "$ torchrun --nproc_per_node=8 pretrain_gpt.py --tensor-model-parallel-size 2",
};
constexpr std::array<std::pair<uint32_t, uint32_t>, 12> kScripts = {{
    {0x4E00, 0x9FFF},   // CJK
    {0x3040, 0x30FF},   // kana
    {0xAC00, 0xD7A3},   // Hangul
    {0x0410, 0x044F},   // Cyrillic
    {0x0391, 0x03C9},   // Greek
    {0x0621, 0x064A},   // Arabic
    {0x05D0, 0x05EA},   // Hebrew
    {0x0900, 0x097F},   // Devanagari (with combining marks)
    {0x0E01, 0x0E5B},   // Thai
    {0x00C0, 0x024F},   // Latin extended
    {0x0660, 0x0669},   // Arabic-Indic digits
    {0xFF10, 0xFF5A},   // full-width forms
}};
constexpr const char* kEmoji[] = {"😀", "🚀", "👍🏽", "👨‍👩‍👧‍👦", "🇨🇳", "🇺🇸", "❤️", "🧠", "⚡", "∑", "∞", "→", "½", "²", "Ⅻ"};

}  // namespace

std::string make_varied_text(size_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  auto pick_of = [&](const auto& arr) { return arr[pick(std::size(arr))]; };
  std::string s;
  s.reserve(bytes + 1024);
  while (s.size() < bytes) {
    const size_t kind = pick(100);
    if (kind >= 90 && kind < 91 && pick(4) != 0) continue;  // long runs: 0.25% of segments
    if (kind < 40) {  // a sentence of words
      const size_t n = 3 + pick(15);
      for (size_t i = 0; i < n; ++i) {
        std::string w = pick_of(kWords);
        if (pick(8) == 0) w[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(w[0])));
        if (pick(20) == 0) for (auto& c : w) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        s += w;
        if (pick(10) == 0) s += pick_of(kContractions);
        if (pick(6) == 0) s += pick_of(kPunct);
        s += pick(15) == 0 ? pick_of(kSpaces) : " ";
      }
      s += pick(3) == 0 ? ".\n" : ". ";
    } else if (kind < 50) {  // numbers
      const size_t digits = 1 + pick(pick(4) == 0 ? 40 : 6);
      if (pick(2)) s += ' ';
      for (size_t i = 0; i < digits; ++i) s += static_cast<char>('0' + pick(10));
      if (pick(3) == 0) { s += pick(2) ? "." : ","; s += std::to_string(pick(1000)); }
      s += pick_of(kSpaces);
    } else if (kind < 62) {  // whitespace runs
      const size_t n = 1 + pick(6);
      for (size_t i = 0; i < n; ++i) s += pick_of(kSpaces);
      if (pick(2)) s += pick_of(kWords);
    } else if (kind < 68) {
      s += pick_of(kCode);
    } else if (kind < 82) {  // another script
      const auto [lo, hi] = kScripts[pick(kScripts.size())];
      const size_t n = 1 + pick(30);
      if (pick(2)) s += ' ';
      for (size_t i = 0; i < n; ++i) {
        unicode::append_utf8(s, lo + static_cast<uint32_t>(pick(hi - lo + 1)));
        if (pick(12) == 0) s += pick(2) ? " " : pick_of(kPunct);
      }
      s += pick_of(kSpaces);
    } else if (kind < 88) {
      s += pick_of(kEmoji);
      if (pick(2)) s += ' ';
    } else if (kind < 91) {  // long unbroken runs (BPE's slow path; O(n^2) in js-tiktoken)
      const size_t n = 100 + pick(200);
      const size_t style = pick(3);
      for (size_t i = 0; i < n; ++i) {
        if (style == 0) s += static_cast<char>('a' + pick(3));
        else if (style == 1) s += "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"[pick(52)];
        else s += "-=_*#~"[pick(6)];
      }
      s += ' ';
    } else if (kind < 96) {  // punctuation clusters
      const size_t n = 1 + pick(6);
      for (size_t i = 0; i < n; ++i) s += pick_of(kPunct);
    } else {  // random code points anywhere in Unicode
      const size_t n = 1 + pick(8);
      for (size_t i = 0; i < n; ++i) {
        uint32_t cp;
        do {
          cp = pick(4) == 0 ? static_cast<uint32_t>(pick(0x110000)) : static_cast<uint32_t>(pick(0x3000));
        } while ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0);
        unicode::append_utf8(s, cp);
      }
      s += pick_of(kSpaces);
    }
  }
  return s;
}

}  // namespace qk::data
