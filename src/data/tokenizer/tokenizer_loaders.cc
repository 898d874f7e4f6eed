// Loading tokenizers: Hugging Face tokenizer.json, GPT-2 vocab.json +
// merges.txt, and Megatron's --tokenizer-type dispatch (SentencePiece models
// load in sentencepiece_tokenizer.cc).
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer/bpe.h"
#include "tokenizer/json_fields.h"
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

void read_vocab_object(const JsonField& v, BpeSpec& spec) {
  v.expect(v.is_object(), "an object token -> id (the vocabulary)");
  spec.vocab.reserve(v.size());
  for (auto it = v.json().begin(); it != v.json().end(); ++it) {
    // The field's name is only built for a message (a vocabulary has ~10^5 entries).
    const json& id = it.value();
    const bool plain = id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() <= INT32_MAX;
    spec.vocab.emplace_back(
        from_byte_level(it.key()),
        plain ? id.get<int32_t>()
              : JsonField(id, spec.source, fmt::format("{}[{}]", v.field(), json(it.key()).dump())).as_id());
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
void read_post_processor(const JsonField& pp, BpeSpec& spec) {
  if (!pp.is_object()) return;
  const std::string type = pp.string_or("type", "");
  if (type == "Sequence") {
    for (JsonField p : pp.array_or_empty("processors")) read_post_processor(p, spec);
  } else if (type == "TemplateProcessing") {
    // The special tokens before the sequence ($A) are a prefix; those after it are not.
    for (JsonField piece : pp.array_or_empty("single")) {
      if (!piece.has("SpecialToken")) break;
      const std::string id = piece.at("SpecialToken").string_or("id", "");
      const JsonField st = pp.at("special_tokens");
      if (st.has(id.c_str()))
        for (JsonField i : st.at(id.c_str()).array_or_empty("ids")) spec.prefix_ids.push_back(i.as_id());
    }
  }
}

// eos/bos/pad from tokenizer_config.json next to tokenizer.json, as
// transformers' AutoTokenizer (Megatron's HuggingFaceTokenizer) reads them.
std::string config_token(const JsonField& cfg, const char* key) {
  if (!cfg.has(key)) return {};
  const JsonField v = cfg.at(key);
  if (v.is_object()) return v.string_or("content", "");
  return v.as_string();
}

}  // namespace

std::unique_ptr<Tokenizer> load_gpt2_bpe(const std::string& vocab_file, const std::string& merge_file) {
  QK_CHECK(!vocab_file.empty() && !merge_file.empty(),
           "GPT2BPETokenizer needs --vocab-file (vocab.json) and --merge-file (merges.txt)");
  BpeSpec spec;
  spec.source = vocab_file;
  const json vocab = parse_json_file(vocab_file, "vocab file");
  read_vocab_object(JsonField(vocab, vocab_file, ""), spec);
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
  const JsonField root(j, path, "");
  const JsonField m = root.at("model");
  const std::string type = m.string_or("type", "BPE");
  QK_CHECK(type == "BPE", path, ": model type '", type,
           "' is not supported; qk reads byte-level BPE tokenizers (GPT-2, Llama-3, Qwen)");
  QK_CHECK(!m.bool_or("byte_fallback", false), path,
           ": byte_fallback BPE (SentencePiece-style) is not supported; use a byte-level BPE");
  if (root.has("normalizer")) {
    const JsonField n = root.at("normalizer");
    QK_THROW(ValueError, path, ": normalizer '", n.is_object() ? n.string_or("type", "?") : n.json().dump(),
             "' is not supported (byte-level BPE has none)");
  }
  read_vocab_object(m.at("vocab"), spec);
  const JsonField merges = m.array_or_empty("merges");
  spec.merges.reserve(merges.size());
  for (JsonField e : merges) {
    const std::string where = fmt::format("{}: {}", path, e.field());
    if (e.json().is_string()) {
      spec.merges.push_back(split_merge(e.as_string(), where));
    } else {
      e.expect(e.json().is_array() && e.size() == 2, "\"a b\" or [\"a\", \"b\"]");
      spec.merges.emplace_back(from_byte_level(e[0].as_string()), from_byte_level(e[1].as_string()));
    }
  }
  spec.ignore_merges = m.bool_or("ignore_merges", false);

  // Pre-tokenizer: ByteLevel with its built-in GPT-2 regex, or a Split regex
  // followed by ByteLevel without one.
  QK_CHECK(root.has("pre_tokenizer"), path,
           ": no pre_tokenizer; expected ByteLevel or Sequence[Split, ByteLevel]");
  const JsonField pre = root.at("pre_tokenizer");
  pre.expect_object();
  const std::string pre_type = pre.string_or("type", "");
  if (pre_type == "ByteLevel") {
    QK_CHECK(pre.bool_or("use_regex", true), path, ": ByteLevel without a split regex is not supported");
    QK_CHECK(!pre.bool_or("add_prefix_space", false), path, ": add_prefix_space is not supported");
    spec.pattern = SplitPattern::kGpt2;
  } else if (pre_type == "Sequence") {
    const JsonField ps = pre.array_or_empty("pretokenizers");
    QK_CHECK(ps.size() == 2 && ps[0].is_object() && ps[0].string_or("type", "") == "Split" &&
                 ps[1].is_object() && ps[1].string_or("type", "") == "ByteLevel",
             path, ": pre_tokenizer Sequence must be [Split, ByteLevel], got ", ps.json().dump().substr(0, 200));
    QK_CHECK(ps[0].has("pattern") && ps[0].at("pattern").has("Regex"), path, ": Split needs a Regex pattern");
    spec.pattern = split_pattern_from_regex(ps[0].at("pattern").at("Regex").as_string());
  } else {
    QK_THROW(ValueError, path, ": pre_tokenizer type '", pre_type,
             "' is not supported; expected ByteLevel or Sequence[Split, ByteLevel]");
  }

  for (JsonField a : root.array_or_empty("added_tokens")) {
    a.expect_object();
    spec.added.push_back({a.at("content").as_string(), a.at("id").as_id(), a.bool_or("special", true)});
  }
  if (root.has("post_processor")) read_post_processor(root.at("post_processor"), spec);

  json cfg_json = json::object();
  const std::string cfg_path = (fs::path(path).parent_path() / "tokenizer_config.json").string();
  if (file_exists(cfg_path)) cfg_json = parse_json_file(cfg_path, "tokenizer config");
  const JsonField cfg(cfg_json, cfg_path, "");
  cfg.expect_object();
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

std::string infer_tokenizer_type(const TokenizerOptions& o) {
  const bool gpt2_files = !o.vocab_file.empty() || !o.merge_file.empty();
  QK_CHECK(!(gpt2_files && !o.model.empty()), "--tokenizer-model '", o.model,
           "' and --vocab-file/--merge-file name two tokenizers; give one, or say which with --tokenizer-type");
  if (gpt2_files) return "GPT2BPETokenizer";
  QK_CHECK(!o.model.empty(), "no tokenizer given: pass --tokenizer-model (tokenizer.json, its folder or an spm "
           ".model) or --vocab-file and --merge-file (GPT-2)");
  namespace fs = std::filesystem;
  if (fs::is_directory(o.model) || fs::path(o.model).extension() == ".json") return "HuggingFaceTokenizer";
  if (fs::path(o.model).extension() == ".model") return "SentencePieceTokenizer";
  // Another name: a JSON document starts with '{'; an spm model is a protobuf.
  QK_CHECK_AS(IoError, file_exists(o.model), "tokenizer model '", o.model, "' not found");
  std::string head(64, '\0');
  std::ifstream f(o.model, std::ios::binary);
  f.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(f.gcount()));
  const size_t first = head.find_first_not_of(" \t\r\n");
  return first != std::string::npos && head[first] == '{' ? "HuggingFaceTokenizer" : "SentencePieceTokenizer";
}

std::unique_ptr<Tokenizer> load_tokenizer(const TokenizerOptions& o) {
  const std::string type = o.type.empty() ? infer_tokenizer_type(o) : o.type;
  if (type == "GPT2BPETokenizer") return load_gpt2_bpe(o.vocab_file, o.merge_file);
  if (type == "HuggingFaceTokenizer") {
    QK_CHECK(!o.model.empty(), "HuggingFaceTokenizer needs --tokenizer-model (tokenizer.json or its folder)");
    return load_hf_tokenizer(o.model);
  }
  if (type == "SentencePieceTokenizer") return load_sentencepiece(o.model);
  if (type == "NullTokenizer") {
    QK_CHECK(o.vocab_size > 0, "NullTokenizer needs --vocab-size (the number of ids before end-of-document)");
    return make_null_tokenizer(o.vocab_size);
  }
  QK_THROW(ValueError, "unknown tokenizer type '", type,
           "'; expected HuggingFaceTokenizer, GPT2BPETokenizer, SentencePieceTokenizer or NullTokenizer");
}

int64_t padded_vocab_size(int64_t vocab_size, int64_t divisible_by, int64_t tp) {
  QK_CHECK(vocab_size > 0 && divisible_by > 0 && tp > 0, "padded_vocab_size: expected positive ",
           "arguments, got vocab ", vocab_size, ", divisible by ", divisible_by, ", tp ", tp);
  const int64_t m = divisible_by * tp;
  return (vocab_size + m - 1) / m * m;
}

}  // namespace qk::data
