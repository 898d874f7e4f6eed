// `qk tokenizer encode|decode|train`.
//
//   echo "Hello world" | qk tokenizer encode --tokenizer-type GPT2BPETokenizer
//       --vocab-file vocab.json --merge-file merges.txt --json      # [15496, 995, 198]
//   echo "[15496, 995]" | qk tokenizer decode --tokenizer-model tok.json   # Hello world
//   qk tokenizer encode --tokenizer-type SentencePieceTokenizer --tokenizer-model m.model --per-line < text
//   qk tokenizer train --vocab-size 8192 --input a.txt b.txt --output tok.json
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <string_view>
#include <nlohmann/json.hpp>

#include "command.h"
#include "data_cli.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/base/timer.h"
#include "qk/data/bpe_trainer.h"

namespace qk::cli {
namespace {

std::string read_input(const std::string& path) {
  if (!path.empty() && path != "-") return qk::read_file(path);
  std::string s((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  return s;
}

struct EncodeCli {
  qk::data::TokenizerOptions t;
  std::string input;
  bool json = false, bench = false, vocab = false, per_line = false;
};

// Each line on its own, one output line of ids per input line (the format of
// SentencePiece's spm_encode --output_format=id, which reads lines too).
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    lines.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return lines;
}

void encode_lines(const qk::data::Tokenizer& tok, const std::vector<std::string_view>& lines,
                  std::vector<std::vector<int32_t>>& ids) {
  ids.resize(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    ids[i].clear();
    tok.encode(lines[i], ids[i]);
  }
}

void run_encode_lines(const EncodeCli& c, const qk::data::Tokenizer& tok, const std::string& text) {
  const auto lines = split_lines(text);
  std::vector<std::vector<int32_t>> ids;
  encode_lines(tok, lines, ids);
  if (c.bench) {
    double best = 1e30;
    for (int r = 0; r < 3; ++r) {
      qk::Timer t;
      encode_lines(tok, lines, ids);
      best = std::min(best, t.seconds());
    }
    size_t n = 0;
    for (const auto& l : ids) n += l.size();
    fmt::print("qk {:.2f} {}\n", text.size() / 1e6 / best, n);
    return;
  }
  std::string out;
  for (const auto& l : ids) {
    out += c.json ? fmt::format("[{}]\n", fmt::join(l, ", ")) : fmt::format("{}\n", fmt::join(l, " "));
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
}

void run_encode(const EncodeCli& c) {
  auto tok = qk::data::load_tokenizer(c.t);
  if (c.vocab) {
    fmt::print("{}\nvocab_size {} (padded to 128: {}), eod {}, bos {}, pad {}\n", tok->describe(),
               tok->vocab_size(), qk::data::padded_vocab_size(tok->vocab_size(), 128), tok->eod(),
               tok->bos(), tok->pad());
    return;
  }
  const std::string text = read_input(c.input);
  if (c.per_line) return run_encode_lines(c, *tok, text);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  if (c.bench) {
    // One warm-up run fills the piece cache, as a long preprocessing run would.
    tok->encode(text, ids);
    double best = 1e30;
    for (int r = 0; r < 3; ++r) {
      ids.clear();
      qk::Timer t;
      tok->encode(text, ids);
      best = std::min(best, t.seconds());
    }
    fmt::print("qk {:.2f} {}\n", text.size() / 1e6 / best, ids.size());
    return;
  }
  tok->encode(text, ids);
  if (c.json) {
    fmt::print("[{}]\n", fmt::join(ids, ", "));
  } else {
    fmt::print("{}\n", fmt::join(ids, " "));
  }
}

struct DecodeCli {
  qk::data::TokenizerOptions t;
  std::string input;
};

void run_decode(const DecodeCli& c) {
  auto tok = qk::data::load_tokenizer(c.t);
  const std::string in = read_input(c.input);
  std::vector<int32_t> ids;
  const size_t first = in.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && in[first] == '[') {
    try {
      ids = nlohmann::json::parse(in).get<std::vector<int32_t>>();
    } catch (const nlohmann::json::exception& e) {
      QK_THROW(ValueError, "decode: input is not a JSON list of ids: ", e.what());
    }
  } else {
    size_t pos = 0;
    while ((pos = in.find_first_not_of(" \t\r\n,", pos)) != std::string::npos) {
      size_t end = in.find_first_of(" \t\r\n,", pos);
      if (end == std::string::npos) end = in.size();
      const std::string w = in.substr(pos, end - pos);
      char* e = nullptr;
      const long v = std::strtol(w.c_str(), &e, 10);
      QK_CHECK(e && *e == '\0' && v >= 0 && v <= INT32_MAX, "decode: '", w,
               "' is not a token id; give ids separated by spaces or a JSON list");
      ids.push_back(static_cast<int32_t>(v));
      pos = end;
    }
  }
  const std::string text = tok->decode(ids);
  std::fwrite(text.data(), 1, text.size(), stdout);
}

struct TrainCli {
  qk::data::BpeTrainerOptions o;
  std::vector<std::string> inputs;
  std::string output = "tokenizer.json";
};

void run_train(const TrainCli& c) {
  qk::Timer timer;
  qk::data::BpeTrainer t(c.o);
  size_t bytes = 0;
  for (const auto& f : c.inputs) {
    const std::string text = qk::read_file(f);
    bytes += text.size();
    t.add_text(text);
  }
  const std::string j = t.train_json();
  qk::atomic_write_file(c.output, j);
  fmt::print("trained a {}-id byte-level BPE on {} ({} distinct pieces) in {}: {}\n", c.o.vocab_size,
             qk::format_bytes(bytes), t.distinct_pieces(), qk::format_duration(timer.seconds()), c.output);
}

void setup_tokenizer(CLI::App& app) {
  app.require_subcommand(1);
  auto* enc = app.add_subcommand("encode", "Text (stdin or --input) to ids on stdout");
  auto e = std::make_shared<EncodeCli>();
  add_tokenizer_flags(*enc, e->t);
  enc->add_option("--input", e->input, "Read this file instead of stdin");
  enc->add_flag("--json", e->json, "Print the ids as a JSON list");
  enc->add_flag("--bench", e->bench, "Print 'qk <MB/s> <ids>' (best of 3 single-thread runs) instead");
  enc->add_flag("--per-line", e->per_line,
                "Encode each line on its own; one line of ids per input line (spm_encode's format)");
  enc->add_flag("--info", e->vocab, "Describe the tokenizer (vocab size, padding, special ids)");
  enc->callback([e] { run_encode(*e); });

  auto* dec = app.add_subcommand("decode", "Ids (JSON list or whitespace-separated) to text");
  auto d = std::make_shared<DecodeCli>();
  add_tokenizer_flags(*dec, d->t);
  dec->add_option("--input", d->input, "Read this file instead of stdin");
  dec->callback([d] { run_decode(*d); });

  auto* tr = app.add_subcommand("train", "Train a byte-level BPE; writes a tokenizer.json");
  auto t = std::make_shared<TrainCli>();
  tr->add_option("--vocab-size", t->o.vocab_size, "Ids in all: 256 bytes + merges + special tokens")
      ->check(CLI::Range(int64_t{257}, int64_t{1} << 30))
      ->capture_default_str();
  tr->add_option("--input", t->inputs, "Text files to learn from")->required()->check(CLI::ExistingFile);
  tr->add_option("--output", t->output, "Where to write tokenizer.json")->capture_default_str();
  tr->add_option("--min-frequency", t->o.min_frequency, "Never merge a pair seen fewer times")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  tr->add_option("--special-tokens", t->o.special_tokens, "Added after the merges; the first is EOD")
      ->capture_default_str();
  tr->callback([t] { run_train(*t); });
}

}  // namespace

QK_REGISTER_COMMAND(tokenizer, "Encode, decode or train a tokenizer", setup_tokenizer);

}  // namespace qk::cli
