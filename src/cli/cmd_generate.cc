// `qk generate`: sample a continuation of a prompt from a trained model,
// streaming the text as it is produced.
//
//   qk generate --load ckpt --prompt "Once upon a time" --max-new-tokens 64 --temperature 0.8 --top-k 40
//   qk generate --load hf/ --prompt "..." --tokenizer-type GPT2BPETokenizer --vocab-file v.json --merge-file m.txt
//
// --load: what qk::recipes::load_gpt_for_inference reads (a `qk pretrain-gpt
// --save` folder, one of its iter_ folders, or a Hugging Face folder). The
// tokenizer: the flags when given, else the checkpoint's (its arguments, or
// the folder's files).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "command.h"
#include "data_cli.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/base/thread_pool.h"
#include "qk/transformer/generate.h"
#include "qk/recipes/pretrained.h"

namespace qk::cli {
namespace {

struct GenerateCli {
  std::string load, prompt, prompt_file, dtype = "f32";
  int64_t max_new_tokens = 64;
  double temperature = 1.0, top_p = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 1234;
  bool greedy = false, ignore_eos = false;
  int threads = 0;
  data::TokenizerOptions tokenizer;
  bool tokenizer_flags = false;  // any tokenizer flag given
};

// Prints the text of the new tokens as they come. The whole sequence is
// decoded each time (SentencePiece spaces depend on what precedes a piece)
// and a trailing incomplete UTF-8 character waits for the next token.
class TextStream {
 public:
  TextStream(const data::Tokenizer& tok, std::vector<int32_t> prompt)
      : tok_(tok), ids_(std::move(prompt)), printed_(tok_.decode(ids_).size()) {}

  void add(int64_t id) {
    ids_.push_back(static_cast<int32_t>(id));
    const std::string text = tok_.decode(ids_);
    const size_t end = complete_utf8_prefix(text);
    if (end > printed_) {
      std::fwrite(text.data() + printed_, 1, end - printed_, stdout);
      std::fflush(stdout);
      printed_ = end;
    }
  }
  // What is still held back (an incomplete character at the very end).
  void flush() {
    const std::string text = tok_.decode(ids_);
    if (text.size() > printed_) std::fwrite(text.data() + printed_, 1, text.size() - printed_, stdout);
    printed_ = text.size();
  }

 private:
  // The length of `s` without a UTF-8 sequence cut off at its end.
  static size_t complete_utf8_prefix(const std::string& s) {
    size_t i = s.size(), back = 0;
    while (i > 0 && back < 4) {
      const auto c = static_cast<unsigned char>(s[i - 1]);
      ++back;
      if ((c & 0xC0) != 0x80) {  // a lead byte (or ASCII): is its sequence complete?
        const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? i - 1 : s.size();
      }
      --i;
    }
    return s.size();
  }

  const data::Tokenizer& tok_;
  std::vector<int32_t> ids_;
  size_t printed_;
};

std::optional<DType> parse_dtype_flag(const std::string& s) {
  if (s == "auto") return std::nullopt;
  return parse_dtype(s);
}

void run_generate(const GenerateCli& c) {
  if (c.threads > 0) set_num_threads(c.threads);
  QK_CHECK_AS(IoError, std::filesystem::exists(c.load), "--load '", c.load, "' does not exist");
  QK_CHECK(c.prompt.empty() || c.prompt_file.empty(), "give --prompt or --prompt-file, not both");
  QK_CHECK(c.top_p > 0 && c.top_p <= 1, "--top-p must be in (0, 1] (1: no limit), got ", c.top_p);
  recipes::LoadedGpt m = recipes::load_gpt_for_inference(c.load, {.dtype = parse_dtype_flag(c.dtype)});

  data::TokenizerOptions topt = c.tokenizer;
  if (!c.tokenizer_flags) {
    QK_CHECK(m.tokenizer.has_value(), m.tokenizer_note, "; give the tokenizer flags: --tokenizer-type with ",
             "--vocab-file/--merge-file or --tokenizer-model (or --vocab-size for NullTokenizer)");
    topt = *m.tokenizer;
  }
  const auto tok = data::load_tokenizer(topt);
  const int64_t model_vocab = m.config.vocab_size;
  const std::string prompt = c.prompt_file.empty() ? c.prompt : read_file(c.prompt_file);
  std::vector<int32_t> ids = tok->encode(prompt);
  if (ids.empty()) {
    // Unconditional generation starts from the document boundary.
    const int64_t start = m.bos_token_id >= 0 ? m.bos_token_id : tok->bos() >= 0 ? tok->bos() : tok->eod();
    QK_CHECK(start >= 0, "the prompt is empty and the tokenizer has neither BOS nor EOD to start from; give --prompt");
    ids.push_back(static_cast<int32_t>(start));
  }
  // Tokenizers may have ids the model lacks (Megatron's extra SentencePiece
  // ids); sampling stays below both sizes, but the prompt must fit the model.
  for (int32_t id : ids)
    QK_CHECK(id < model_vocab, "the prompt encodes to token ", id, ", outside the model's vocabulary of ", model_vocab,
             "; is the tokenizer (", tok->describe(), ") the one the model was trained with?");

  transformer::GenerateOptions o;
  o.max_new_tokens = c.max_new_tokens;
  o.sampling = {.temperature = c.greedy ? 0.0 : c.temperature, .top_k = c.top_k, .top_p = c.top_p};
  o.seed = c.seed;
  o.vocab_size = std::min(model_vocab, tok->vocab_size());
  if (!c.ignore_eos) {
    if (tok->eod() >= 0) o.stop_tokens.push_back(tok->eod());
    for (int64_t id : m.eos_token_ids) o.stop_tokens.push_back(id);
  }
  TextStream stream(*tok, ids);
  o.on_token = [&](int64_t, int64_t id) {
    stream.add(id);
    return true;
  };
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  const transformer::GenerateResult r =
      transformer::generate(*m.model, {std::vector<int64_t>(ids.begin(), ids.end())}, o);
  stream.flush();
  fmt::print(
      "\n[qk generate] {} new tokens in {:.2f} s: {:.1f} tokens/s (prompt {} tokens, first token after "
      "{:.3f} s, then {:.1f} tokens/s); stopped by {}\n",
      r.new_tokens, r.seconds(), r.tokens_per_second(), r.prompt_tokens, r.prefill_seconds,
      r.decode_tokens_per_second(), transformer::to_string(r.finish[0]));
}

void setup_generate(CLI::App& app) {
  auto c = std::make_shared<GenerateCli>();
  app.add_option("--load", c->load,
                 "Model: a qk pretrain-gpt --save folder (its newest checkpoint), one iter_ folder, or a Hugging Face "
                 "folder (config.json + model.safetensors)")
      ->required();
  app.add_option("--prompt", c->prompt, "Text to continue (empty: start from BOS/EOD)");
  app.add_option("--prompt-file", c->prompt_file, "Read the prompt from this file")->check(CLI::ExistingFile);
  app.add_option("--max-new-tokens", c->max_new_tokens, "Tokens to generate at most")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--temperature", c->temperature, "Divide the logits by this (0: greedy)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  app.add_option("--top-k", c->top_k, "Sample among the k most likely tokens (0: all, 1: greedy)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--top-p", c->top_p, "Sample from the smallest set of most likely tokens with this mass (1: all)")
      ->capture_default_str();
  app.add_option("--seed", c->seed, "Seed of the sampler (same seed, same text)")->capture_default_str();
  app.add_flag("--greedy", c->greedy, "Always take the most likely token (as --temperature 0)");
  app.add_flag("--ignore-eos", c->ignore_eos, "Do not stop at the tokenizer's EOD or the model's EOS");
  app.add_option("--dtype", c->dtype,
                 "Compute in this dtype (auto: as the checkpoint stores it; f32, as transformers loads by default, "
                 "widens bf16/f16 weights exactly)")
      ->check(CLI::IsMember({"auto", "f32", "bf16", "f16"}))
      ->capture_default_str();
  app.add_option("--threads", c->threads, "Compute threads (0: default)")->check(CLI::Range(0, 1024));
  add_tokenizer_flags(app, c->tokenizer);
  app.callback([c, &app] {
    for (const char* flag : {"--tokenizer-type", "--tokenizer-model", "--vocab-file", "--merge-file"})
      if (app.get_option(flag)->count() > 0) c->tokenizer_flags = true;
    // GPT-2's files alone say which tokenizer they are.
    if (app.get_option("--tokenizer-type")->count() == 0 && !c->tokenizer.vocab_file.empty())
      c->tokenizer.type = "GPT2BPETokenizer";
    run_generate(*c);
  });
}

}  // namespace

QK_REGISTER_COMMAND(generate, "Generate text from a trained model (KV cache; greedy, top-k, top-p)", setup_generate);

}  // namespace qk::cli
