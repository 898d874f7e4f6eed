// BPE training: count pieces, then repeatedly merge the most frequent
// adjacent pair (ties: the smaller pair of ids, for determinism), updating
// pair counts only in the words that contain the merged pair. A max-heap with
// lazy deletion picks the pair; an entry whose count changed since it was
// pushed is skipped (the current count was pushed too).
#include "qk/data/bpe_trainer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <queue>

#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"
#include "qk/base/error.h"

namespace qk::data {
namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

std::string to_byte_level(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) unicode::append_utf8(out, unicode::byte_to_cp()[c]);
  return out;
}

}  // namespace

BpeTrainer::BpeTrainer(BpeTrainerOptions o) : o_(std::move(o)) {
  QK_CHECK(o_.vocab_size >= 256 + static_cast<int64_t>(o_.special_tokens.size()),
           "--vocab-size must be at least 256 + the special tokens (", 256 + o_.special_tokens.size(),
           "), got ", o_.vocab_size);
  QK_CHECK(o_.vocab_size <= (int64_t{1} << 30), "--vocab-size ", o_.vocab_size, " is too large");
  QK_CHECK(o_.min_frequency >= 1, "min_frequency must be >= 1, got ", o_.min_frequency);
}

void BpeTrainer::add_text(std::string_view text) {
  std::vector<std::pair<size_t, size_t>> pieces;
  split_pieces(SplitPattern::kGpt2, text, pieces);
  for (auto [off, len] : pieces) ++counts_[std::string(text.substr(off, len))];
}

std::string BpeTrainer::train_json() const {
  // Words in a fixed order (sorted) so training is deterministic.
  std::vector<std::pair<std::string, int64_t>> words(counts_.begin(), counts_.end());
  std::sort(words.begin(), words.end());
  std::vector<std::vector<int32_t>> sym(words.size());
  std::vector<std::string> tokens(256);
  for (int b = 0; b < 256; ++b) tokens[b] = std::string(1, static_cast<char>(b));
  std::unordered_map<uint64_t, int64_t> count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> where;
  for (size_t w = 0; w < words.size(); ++w) {
    for (unsigned char c : words[w].first) sym[w].push_back(c);
    for (size_t i = 0; i + 1 < sym[w].size(); ++i) {
      const uint64_t k = pair_key(sym[w][i], sym[w][i + 1]);
      count[k] += words[w].second;
      where[k].push_back(static_cast<uint32_t>(w));
    }
  }
  using Entry = std::pair<int64_t, uint64_t>;  // (count, -pair order)
  auto cmp = [](const Entry& x, const Entry& y) {
    return x.first != y.first ? x.first < y.first : x.second > y.second;
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(cmp)> heap(cmp);
  for (const auto& [k, c] : count) heap.push({c, k});

  std::vector<std::pair<int32_t, int32_t>> merges;
  const int64_t max_merges = o_.vocab_size - 256 - static_cast<int64_t>(o_.special_tokens.size());
  while (static_cast<int64_t>(merges.size()) < max_merges && !heap.empty()) {
    auto [c, k] = heap.top();
    heap.pop();
    auto it = count.find(k);
    if (it == count.end() || it->second != c) continue;  // stale
    if (c < o_.min_frequency) break;
    const int32_t a = static_cast<int32_t>(k >> 32), b = static_cast<int32_t>(k & 0xffffffff);
    const int32_t id = static_cast<int32_t>(tokens.size());
    tokens.push_back(tokens[a] + tokens[b]);
    merges.emplace_back(a, b);
    std::vector<uint32_t> ws = std::move(where[k]);
    where.erase(k);
    std::sort(ws.begin(), ws.end());
    ws.erase(std::unique(ws.begin(), ws.end()), ws.end());
    std::vector<uint64_t> touched;
    auto bump = [&](int32_t x, int32_t y, int64_t d, uint32_t w) {
      const uint64_t pk = pair_key(x, y);
      count[pk] += d;
      touched.push_back(pk);
      if (d > 0) where[pk].push_back(w);
    };
    // Simplest correct update: remove the word's old pairs, add its new ones.
    for (uint32_t w : ws) {
      auto& s = sym[w];
      const int64_t f = words[w].second;
      std::vector<int32_t> out;
      out.reserve(s.size());
      for (size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          out.push_back(id);
          i += 2;
        } else {
          out.push_back(s[i++]);
        }
      }
      for (size_t i = 0; i + 1 < s.size(); ++i) bump(s[i], s[i + 1], -f, w);
      for (size_t i = 0; i + 1 < out.size(); ++i) bump(out[i], out[i + 1], f, w);
      s.swap(out);
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (uint64_t pk : touched) {
      auto ct = count.find(pk);
      if (ct == count.end()) continue;
      if (ct->second <= 0) count.erase(ct);
      else heap.push({ct->second, pk});
    }
  }

  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[to_byte_level(tokens[i])] = i;
  nlohmann::ordered_json jm = nlohmann::ordered_json::array();
  for (auto [a, b] : merges) jm.push_back(to_byte_level(tokens[a]) + " " + to_byte_level(tokens[b]));
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (const auto& s : o_.special_tokens) {
    QK_CHECK(!s.empty(), "special tokens must not be empty");
    const int64_t id = static_cast<int64_t>(tokens.size()) + static_cast<int64_t>(added.size());
    added.push_back({{"id", id}, {"content", s}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
    vocab[s] = id;
  }
  nlohmann::ordered_json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                                       {"trim_offsets", true}, {"use_regex", true}};
  nlohmann::ordered_json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", byte_level},
      {"post_processor", byte_level},
      {"decoder", byte_level},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                 {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                 {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                 {"vocab", vocab}, {"merges", jm}}}};
  return j.dump(1);
}

}  // namespace qk::data
