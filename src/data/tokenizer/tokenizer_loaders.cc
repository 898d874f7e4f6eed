// Loading tokenizers: Hugging Face tokenizer.json, GPT-2 vocab.json +
// merges.txt, and Megatron's --tokenizer-type dispatch (SentencePiece models
// load in sentencepiece_tokenizer.cc).
#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tokenizer/bpe.h"
#include "tokenizer/sentencepiece.h"
#include "tokenizer/unicode.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/data/tokenizer.h"

namespace qk::data {
namespace {

using json = nlohmann::json;

json parse_json_file(const std::string& path, const char* what) {
  QK_CHECK_AS(IoError, file_exists(path), what, " '", path, "' not found");
  try {
    return json::parse(read_file(path));
  } catch (const json::exception& e) {
    QK_THROW(ValueError, what, " '", path, "' is not valid JSON: ", e.what());
  }
}

// GPT-2's printable form -> raw bytes. Strings with characters outside the
// byte map (some added tokens) are kept as their UTF-8 text.
std::string from_byte_level(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  auto* p = reinterpret_cast<const unsigned char*>(s.data());
  auto* end = p + s.size();
  while (p < end) {
    uint32_t cp;
    int n = unicode::decode_utf8(p, end, &cp);
    int b = unicode::cp_to_byte(cp);
    if (b < 0) return std::string(s);
    out += static_cast<char>(b);
    p += n;
  }
  return out;
}

std::pair<std::string, std::string> split_merge(std::string_view line, const std::string& where) {
  size_t sp = line.find(' ');
  QK_CHECK(sp != std::string_view::npos && sp > 0 && sp + 1 < line.size() &&
               line.find(' ', sp + 1) == std::string_view::npos,
           where, ": expected a merge 'left right', got '", line, "'");
  return {from_byte_level(line.substr(0, sp)), from_byte_level(line.substr(sp + 1))};
}

void read_vocab_object(const json& v, const std::string& where, BpeSpec& spec) {
  QK_CHECK(v.is_object(), where, ": the vocabulary must be a JSON object token -> id");
  spec.vocab.reserve(v.size());
  for (auto it = v.begin(); it != v.end(); ++it) {
    QK_CHECK(it.value().is_number_integer(), where, ": token '", it.key(), "' has a non-integer id");
    spec.vocab.emplace_back(from_byte_level(it.key()), it.value().get<int32_t>());
  }
}

int32_t lookup(const BpeSpec& spec, std::string_view token) {
  for (const auto& a : spec.added)
    if (a.content == token) return a.id;
  for (const auto& [bytes, id] : spec.vocab)
    if (bytes == token) return id;
  return -1;
}

int32_t first_known(const BpeSpec& spec, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (int32_t id = lookup(spec, n); id >= 0) return id;
  return -1;
}

// The BOS a TemplateProcessing post-processor puts before a single sequence.
void read_post_processor(const json& pp, BpeSpec& spec) {
  if (!pp.is_object()) return;
  const std::string type = pp.value("type", "");
  if (type == "Sequence") {
    for (const auto& p : pp.value("processors", json::array())) read_post_processor(p, spec);
  } else if (type == "TemplateProcessing") {
    for (const auto& piece : pp.value("single", json::array())) {
      if (!piece.contains("SpecialToken")) continue;
      const std::string id = piece["SpecialToken"].value("id", "");
      const auto& st = pp.value("special_tokens", json::object());
      if (st.contains(id))
        for (const auto& i : st[id].value("ids", json::array())) spec.prefix_ids.push_back(i.get<int32_t>());
      if (piece != pp["single"].front()) break;  // only a leading special token
    }
  }
}

// eos/bos/pad from tokenizer_config.json next to tokenizer.json, as
// transformers' AutoTokenizer (Megatron's HuggingFaceTokenizer) reads them.
std::string config_token(const json& cfg, const char* key) {
  if (!cfg.contains(key)) return {};
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return {};
}

}  // namespace

std::unique_ptr<Tokenizer> load_gpt2_bpe(const std::string& vocab_file, const std::string& merge_file) {
  QK_CHECK(!vocab_file.empty() && !merge_file.empty(),
           "GPT2BPETokenizer needs --vocab-file (vocab.json) and --merge-file (merges.txt)");
  BpeSpec spec;
  spec.source = vocab_file;
  read_vocab_object(parse_json_file(vocab_file, "vocab file"), vocab_file, spec);
  QK_CHECK_AS(IoError, file_exists(merge_file), "merge file '", merge_file, "' not found");
  const std::string text = read_file(merge_file);
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    spec.merges.push_back(split_merge(line, fmt::format("{}:{}", merge_file, line_no)));
  }
  // Megatron's GPT2BPETokenizer treats "<|endoftext|>" in text as text.
  spec.match_added_tokens = false;
  spec.pattern = SplitPattern::kGpt2;
  spec.eod = lookup(spec, "<|endoftext|>");
  QK_CHECK(spec.eod >= 0, vocab_file, ": no <|endoftext|> token; is this GPT-2's vocab.json?");
  return std::make_unique<BpeTokenizer>(std::move(spec));
}

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& model) {
  namespace fs = std::filesystem;
  std::string path = model;
  if (fs::is_directory(path)) path = (fs::path(model) / "tokenizer.json").string();
  const json j = parse_json_file(path, "tokenizer file");
  BpeSpec spec;
  spec.source = path;
  QK_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), path,
           ": no \"model\" object; is this a Hugging Face tokenizer.json?");
  const json& m = j["model"];
  const std::string type = m.value("type", "BPE");
  QK_CHECK(type == "BPE", path, ": model type '", type,
           "' is not supported; qk reads byte-level BPE tokenizers (GPT-2, Llama-3, Qwen)");
  QK_CHECK(!m.value("byte_fallback", false), path,
           ": byte_fallback BPE (SentencePiece-style) is not supported; use a byte-level BPE");
  QK_CHECK(!j.contains("normalizer") || j["normalizer"].is_null(), path, ": normalizer '",
           j["normalizer"].value("type", "?"), "' is not supported (byte-level BPE has none)");
  QK_CHECK(m.contains("vocab"), path, ": model has no \"vocab\"");
  read_vocab_object(m["vocab"], path, spec);
  const json& merges = m.value("merges", json::array());
  QK_CHECK(merges.is_array(), path, ": model.merges must be an array");
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& e = merges[i];
    const std::string where = fmt::format("{}: merge {}", path, i);
    if (e.is_string()) {
      spec.merges.push_back(split_merge(e.get<std::string>(), where));
    } else {
      QK_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(), where,
               ": expected \"a b\" or [\"a\", \"b\"]");
      spec.merges.emplace_back(from_byte_level(e[0].get<std::string>()),
                               from_byte_level(e[1].get<std::string>()));
    }
  }
  spec.ignore_merges = m.value("ignore_merges", false);

  // Pre-tokenizer: ByteLevel with its built-in GPT-2 regex, or a Split regex
  // followed by ByteLevel without one.
  const json& pre = j.value("pre_tokenizer", json());
  QK_CHECK(pre.is_object(), path, ": no pre_tokenizer; expected ByteLevel or Sequence[Split, ByteLevel]");
  const std::string pre_type = pre.value("type", "");
  if (pre_type == "ByteLevel") {
    QK_CHECK(pre.value("use_regex", true), path, ": ByteLevel without a split regex is not supported");
    QK_CHECK(!pre.value("add_prefix_space", false), path, ": add_prefix_space is not supported");
    spec.pattern = SplitPattern::kGpt2;
  } else if (pre_type == "Sequence") {
    const json& ps = pre.value("pretokenizers", json::array());
    QK_CHECK(ps.size() == 2 && ps[0].value("type", "") == "Split" && ps[1].value("type", "") == "ByteLevel",
             path, ": pre_tokenizer Sequence must be [Split, ByteLevel], got ", ps.dump().substr(0, 200));
    const json& pat = ps[0].value("pattern", json::object());
    QK_CHECK(pat.contains("Regex") && pat["Regex"].is_string(), path, ": Split needs a Regex pattern");
    spec.pattern = split_pattern_from_regex(pat["Regex"].get<std::string>());
  } else {
    QK_THROW(ValueError, path, ": pre_tokenizer type '", pre_type,
             "' is not supported; expected ByteLevel or Sequence[Split, ByteLevel]");
  }

  for (const auto& a : j.value("added_tokens", json::array())) {
    QK_CHECK(a.contains("id") && a.contains("content"), path, ": added token without id/content");
    spec.added.push_back({a["content"].get<std::string>(), a["id"].get<int32_t>(), a.value("special", true)});
  }
  read_post_processor(j.value("post_processor", json()), spec);

  json cfg = json::object();
  const std::string cfg_path = (fs::path(path).parent_path() / "tokenizer_config.json").string();
  if (file_exists(cfg_path)) cfg = parse_json_file(cfg_path, "tokenizer config");
  auto pick = [&](const char* key, std::initializer_list<const char*> fallbacks) {
    std::string name = config_token(cfg, key);
    if (!name.empty()) {
      int32_t id = lookup(spec, name);
      QK_CHECK(id >= 0, cfg_path, ": ", key, " '", name, "' is not in the vocabulary");
      return id;
    }
    return first_known(spec, fallbacks);
  };
  spec.eod = pick("eos_token", {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>"});
  spec.bos = pick("bos_token", {"<|begin_of_text|>", "<s>", "<bos>"});
  spec.pad = pick("pad_token", {"<pad>", "<|pad|>"});
  return std::make_unique<BpeTokenizer>(std::move(spec));
}

std::unique_ptr<Tokenizer> load_tokenizer(const TokenizerOptions& o) {
  if (o.type == "GPT2BPETokenizer") return load_gpt2_bpe(o.vocab_file, o.merge_file);
  if (o.type == "HuggingFaceTokenizer") {
    QK_CHECK(!o.model.empty(), "HuggingFaceTokenizer needs --tokenizer-model (tokenizer.json or its folder)");
    return load_hf_tokenizer(o.model);
  }
  if (o.type == "SentencePieceTokenizer") return load_sentencepiece(o.model);
  QK_THROW(ValueError, "unknown tokenizer type '", o.type,
           "'; expected HuggingFaceTokenizer, GPT2BPETokenizer or SentencePieceTokenizer");
}

int64_t padded_vocab_size(int64_t vocab_size, int64_t divisible_by, int64_t tp) {
  QK_CHECK(vocab_size > 0 && divisible_by > 0 && tp > 0, "padded_vocab_size: expected positive ",
           "arguments, got vocab ", vocab_size, ", divisible by ", divisible_by, ", tp ", tp);
  const int64_t m = divisible_by * tp;
  return (vocab_size + m - 1) / m * m;
}

}  // namespace qk::data
