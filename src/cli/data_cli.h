// Shared by the data commands (`qk preprocess`, `qk tokenizer`, `qk data`):
// Megatron's tokenizer flags, and a registry of `qk data <sub>` commands so
// other files can add data subcommands without touching cmd_data.cc:
//
//   // in src/cli/cmd_data_cifar.cc:
//   static void setup_synth(CLI::App& app) { ...; app.callback([] { ... }); }
//   QK_REGISTER_DATA_COMMAND(synth_cifar, "synth-cifar", "Write a synthetic CIFAR-10", setup_synth);
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qk/data/tokenizer.h"

namespace qk::cli {

struct DataCommand {
  std::string name;
  std::string summary;
  std::function<void(CLI::App&)> setup;
};

inline std::vector<DataCommand>& data_commands() {
  static std::vector<DataCommand> c;
  return c;
}

struct DataRegistrar {
  DataRegistrar(std::string name, std::string summary, std::function<void(CLI::App&)> setup) {
    data_commands().push_back({std::move(name), std::move(summary), std::move(setup)});
  }
};

// --tokenizer-type, --tokenizer-model, --vocab-file, --merge-file.
inline void add_tokenizer_flags(CLI::App& app, qk::data::TokenizerOptions& o, bool required = true) {
  app.add_option("--tokenizer-type", o.type,
                 "HuggingFaceTokenizer (tokenizer.json), GPT2BPETokenizer (vocab.json + merges.txt) "
                 "or SentencePieceTokenizer (an spm .model); by default the files given say which")
      ->check(CLI::IsMember({"HuggingFaceTokenizer", "GPT2BPETokenizer", "SentencePieceTokenizer"}));
  auto* m = app.add_option("--tokenizer-model", o.model, "tokenizer.json or the folder holding it (HuggingFaceTokenizer); the .model file (SentencePieceTokenizer)");
  auto* v = app.add_option("--vocab-file", o.vocab_file, "GPT-2 vocab.json (GPT2BPETokenizer)");
  app.add_option("--merge-file", o.merge_file, "GPT-2 merges.txt (GPT2BPETokenizer)");
  if (required) {
    m->check(CLI::ExistingPath);
    v->check(CLI::ExistingFile);
  }
}

}  // namespace qk::cli

#define QK_REGISTER_DATA_COMMAND(ident, name, summary, setup) \
  static ::qk::cli::DataRegistrar qk_data_registrar_##ident(name, summary, setup)
