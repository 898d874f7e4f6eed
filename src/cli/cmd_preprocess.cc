// `qk preprocess`: Megatron-LM's tools/preprocess_data.py, natively.
//
//   qk preprocess --input corpus.jsonl --json-keys text --output-prefix data/corpus
//       --tokenizer-type GPT2BPETokenizer --vocab-file vocab.json --merge-file merges.txt
//       --append-eod --workers 4
// Progress goes to stderr; stdout gets one "token-count path" line per
// dataset, ready for Megatron's DATA_PATH.
#include <fmt/format.h>

#include "command.h"
#include "data_cli.h"
#include "qk/base/log.h"
#include "qk/base/timer.h"
#include "qk/data/preprocess.h"

namespace qk::cli {
namespace {

struct PreprocessCli {
  qk::data::PreprocessOptions p;
  qk::data::TokenizerOptions t;
  bool quiet = false;
};

void run_preprocess(const PreprocessCli& c) {
  auto tok = qk::data::load_tokenizer(c.t);
  QK_INFO("tokenizer: {}", tok->describe());
  auto progress = [&](const qk::data::PreprocessProgress& p) {
    if (c.quiet) return;
    const double s = std::max(p.seconds, 1e-9);
    fmt::print(stderr, "{}Processed {} documents ({:.0f} docs/s, {:.2f} MB/s).{}",
               p.done ? "\r" : "\r", p.documents, p.documents / s, p.bytes / 1e6 / s,
               p.done ? "\n" : "");
    std::fflush(stderr);
  };
  auto r = qk::data::preprocess(c.p, *tok, progress);
  int64_t tokens = 0;
  for (const auto& o : r.outputs) tokens += o.tokens;
  if (!c.quiet) {
    fmt::print(stderr, "Done: {} documents, {} in {} ({:.2f} MB/s, {} workers), {} tokens{}; peak RSS {}\n",
               r.documents, qk::format_bytes(static_cast<uint64_t>(r.bytes)), qk::format_duration(r.seconds),
               r.bytes / 1e6 / std::max(r.seconds, 1e-9), c.p.workers, tokens,
               r.skipped ? fmt::format(", {} invalid lines skipped", r.skipped) : "",
               qk::format_bytes(qk::peak_rss_bytes()));
  }
  for (const auto& o : r.outputs) fmt::print("{} {}\n", o.tokens, o.prefix);
}

void setup_preprocess(CLI::App& app) {
  auto c = std::make_shared<PreprocessCli>();
  app.add_option("--input", c->p.input, "A JSON-lines file, or a folder of .txt files")->required();
  app.add_option("--json-keys", c->p.json_keys, "Fields of each JSON line to tokenize")
      ->capture_default_str();
  add_tokenizer_flags(app, c->t);
  app.add_flag("--append-eod", c->p.append_eod, "Append the end-of-document token to each document");
  app.add_option("--output-prefix", c->p.output_prefix,
                 "Output datasets are PREFIX_<key>_document.bin/.idx")
      ->required();
  app.add_option("--workers", c->p.workers, "Tokenizer threads")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_flag("--skip-invalid", c->p.skip_invalid,
               "Warn about and skip malformed lines instead of stopping");
  app.add_flag("-q,--quiet", c->quiet, "No progress on stderr");
  app.callback([c] { run_preprocess(*c); });
}

}  // namespace

QK_REGISTER_COMMAND(preprocess, "Tokenize text into Megatron .bin/.idx datasets", setup_preprocess);

}  // namespace qk::cli
