// `qk preprocess`: raw text -> Megatron indexed datasets, the native
// counterpart of Megatron-LM's tools/preprocess_data.py.
//
//   qk::data::PreprocessOptions o;
//   o.input = "corpus.jsonl";  o.output_prefix = "data/corpus";  o.append_eod = true;
//   o.workers = 4;
//   auto tok = qk::data::load_tokenizer({...});
//   auto r = qk::data::preprocess(o, *tok, nullptr);
//   // r.outputs[0].prefix == "data/corpus_text_document", r.outputs[0].tokens == ...
//
// Inputs:
//   - a JSON-lines file: each line an object; every --json-keys field (a
//     string, or a list of strings = sentences) becomes one document of the
//     dataset PREFIX_<key>_document;
//   - a folder of .txt files (the seed's layout): each file becomes the single
//     document of its own dataset PREFIX_<file name>_document, each line a
//     sentence (sequence).
// Workers tokenize in parallel; output order equals input order. Memory is
// bounded by (2 * workers + 2) batches of ~1 MiB of text, whatever the input size.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qk/data/tokenizer.h"

namespace qk::data {

struct PreprocessOptions {
  std::string input;
  std::vector<std::string> json_keys = {"text"};
  std::string output_prefix;
  bool append_eod = false;
  int workers = 1;
  // Malformed JSON lines, missing keys, invalid UTF-8: fatal (naming file and
  // line) unless skip_invalid, which warns and skips the line instead.
  bool skip_invalid = false;
  size_t batch_bytes = 1 << 20;
};

struct PreprocessOutput {
  std::string prefix;  // absolute dataset prefix (no .bin/.idx)
  int64_t tokens = 0;
  int64_t documents = 0;
};

struct PreprocessProgress {
  int64_t documents = 0;
  int64_t bytes = 0;
  double seconds = 0;
  bool done = false;
};

struct PreprocessResult {
  std::vector<PreprocessOutput> outputs;
  int64_t documents = 0;
  int64_t bytes = 0;
  int64_t skipped = 0;  // invalid lines skipped (skip_invalid)
  double seconds = 0;
};

// Called at most every ~0.5 s and once at the end (done = true), never
// from two threads at once.
using ProgressFn = std::function<void(const PreprocessProgress&)>;

PreprocessResult preprocess(const PreprocessOptions& o, const Tokenizer& tok,
                            const ProgressFn& progress);

}  // namespace qk::data
