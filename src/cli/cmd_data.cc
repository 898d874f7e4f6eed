// `qk data <sub>`: dataset tools. Subcommands register through
// QK_REGISTER_DATA_COMMAND (cli/data_cli.h); this file adds `inspect`
// and `synth-text`.
//
//   qk data inspect data/corpus_text_document            # summary
//   qk data inspect data/corpus_text_document --json     # every sequence, for scripts
//   qk data inspect P --tokenizer-type ... --docs 3      # first documents decoded
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "command.h"
#include "data_cli.h"
#include "qk/base/error.h"
#include "qk/data/gpt_dataset.h"
#include "qk/data/indexed_dataset.h"
#include "qk/data/text_gen.h"

namespace qk::cli {
namespace {

struct InspectCli {
  std::string prefix;
  bool json = false;
  size_t docs = 3;
  size_t show = 16;
  qk::data::TokenizerOptions t;
};

std::string strip_suffix(std::string p) {
  for (const char* s : {".idx", ".bin"})
    if (p.size() > 4 && p.ends_with(s)) p.resize(p.size() - 4);
  return p;
}

template <typename T>
std::string head(const std::vector<T>& v, size_t n) {
  std::string s = fmt::format("[{}", fmt::join(v.begin(), v.begin() + static_cast<ptrdiff_t>(std::min(n, v.size())), ", "));
  if (v.size() > n) s += fmt::format(", ... ({} more)", v.size() - n);
  return s + "]";
}

void run_inspect(const InspectCli& c) {
  const qk::data::IndexedDataset ds(strip_suffix(c.prefix));
  const auto lengths = ds.sequence_lengths();
  if (c.json) {
    nlohmann::json j;
    j["prefix"] = ds.prefix();
    j["dtype"] = qk::data::dtype_name(ds.dtype());
    j["dtype_code"] = static_cast<int>(ds.dtype());
    j["num_sequences"] = ds.num_sequences();
    j["num_documents"] = ds.num_documents();
    j["num_tokens"] = ds.num_tokens();
    j["sequence_lengths"] = lengths;
    j["sequence_pointers"] = ds.sequence_pointers();
    j["document_indices"] = ds.document_indices();
    nlohmann::json seqs = nlohmann::json::array();
    for (size_t i = 0; i < ds.num_sequences(); ++i) seqs.push_back(ds.get(i));
    j["sequences"] = std::move(seqs);
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("dataset     {}\n", ds.prefix());
  fmt::print("dtype       {} (code {})\n", qk::data::dtype_name(ds.dtype()), static_cast<int>(ds.dtype()));
  fmt::print("documents   {}\nsequences   {}\ntokens      {}\n", ds.num_documents(), ds.num_sequences(),
             ds.num_tokens());
  if (!lengths.empty()) {
    auto [mn, mx] = std::minmax_element(lengths.begin(), lengths.end());
    fmt::print("seq length  min {}, mean {:.1f}, max {}\n", *mn,
               static_cast<double>(ds.num_tokens()) / lengths.size(), *mx);
  }
  fmt::print("lengths     {}\n", head(lengths, c.show));
  fmt::print("doc index   {}\n", head(ds.document_indices(), c.show));
  std::unique_ptr<qk::data::Tokenizer> tok;
  if (!c.t.model.empty() || !c.t.vocab_file.empty()) tok = qk::data::load_tokenizer(c.t);
  for (size_t k = 0; k < std::min(c.docs, ds.num_documents()); ++k) {
    const auto doc = ds.document(k);
    if (tok) {
      std::vector<int32_t> ids(doc.begin(), doc.end());
      std::string text = tok->decode(ids);
      if (text.size() > 400) text = text.substr(0, 400) + "...";
      fmt::print("document {} ({} tokens): {:?}\n", k, doc.size(), text);
    } else {
      fmt::print("document {} ({} tokens): {}\n", k, doc.size(), head(doc, c.show));
    }
  }
}

void setup_inspect(CLI::App& app) {
  auto c = std::make_shared<InspectCli>();
  app.add_option("prefix", c->prefix, "Dataset prefix (PATH without .bin/.idx)")->required();
  app.add_flag("--json", c->json, "Print everything, every sequence's tokens included, as JSON");
  app.add_option("--docs", c->docs, "How many documents to show")->capture_default_str();
  app.add_option("--show", c->show, "How many entries of each array to show")->capture_default_str();
  add_tokenizer_flags(app, c->t, /*required=*/false);
  app.callback([c] { run_inspect(*c); });
}

QK_REGISTER_DATA_COMMAND(inspect, "inspect", "Summarize a Megatron .bin/.idx dataset", setup_inspect);

// `qk data samples`: Megatron GPTDataset / BlendedDataset samples.
struct SamplesCli {
  std::string data_path;
  qk::data::GptDatasetOptions o;
  std::string split_name = "train";
  size_t show = 8;
  bool json = false;
};

void run_samples(SamplesCli& c) {
  c.o.split_name = qk::data::parse_split_name(c.split_name);
  const auto entries = qk::data::parse_data_path(c.data_path);
  if (entries.size() == 1) {
    const qk::data::IndexedDataset ds(strip_suffix(entries[0].prefix));
    const qk::data::GptDataset g(ds, c.o);
    const size_t n = std::min<size_t>(g.size(), static_cast<size_t>(c.o.num_samples));
    if (c.json) {
      nlohmann::json j;
      j["split"] = {g.split_begin(), g.split_end()};
      j["num_epochs"] = g.num_epochs();
      j["document_index"] = g.document_index();
      nlohmann::json si = nlohmann::json::array();
      for (size_t k = 0; k + 1 < g.sample_index().size(); k += 2)
        si.push_back({g.sample_index()[k], g.sample_index()[k + 1]});
      j["sample_index"] = std::move(si);
      j["shuffle_index"] = g.shuffle_index();
      nlohmann::json samples = nlohmann::json::array();
      for (size_t i = 0; i < n; ++i) samples.push_back(g.sample(i));
      j["samples"] = std::move(samples);
      fmt::print("{}\n", j.dump());
      return;
    }
    fmt::print("dataset        {} (sequences [{}, {}) of {})\n", ds.prefix(), g.split_begin(), g.split_end(),
               ds.num_sequences());
    fmt::print("samples        {} built over {} epoch(s){}\n", g.size(), g.num_epochs(),
               g.loaded_from_cache() ? ", loaded from cache" : "");
    fmt::print("cache          {}*\n", g.cache_base());
    fmt::print("document index {}\n", head(g.document_index(), c.show));
    fmt::print("sample index   {}\n", head(g.sample_index(), 2 * c.show));
    fmt::print("shuffle index  {}\n", head(g.shuffle_index(), c.show));
    for (size_t i = 0; i < std::min(n, c.show); ++i) fmt::print("sample {}: {}\n", i, head(g.sample(i), c.show));
    return;
  }
  std::vector<qk::data::BlendEntry> stripped = entries;
  for (auto& e : stripped) e.prefix = strip_suffix(e.prefix);
  const qk::data::BlendedGptDataset b(stripped, c.o);
  if (c.json) {
    nlohmann::json j;
    j["dataset_index"] = b.dataset_index();
    j["dataset_sample_index"] = b.dataset_sample_index();
    nlohmann::json samples = nlohmann::json::array();
    for (size_t i = 0; i < b.size(); ++i) samples.push_back(b.sample(i));
    j["samples"] = std::move(samples);
    fmt::print("{}\n", j.dump());
    return;
  }
  for (size_t d = 0; d < b.num_datasets(); ++d)
    fmt::print("dataset {}      weight {:.4f}, {} samples built, {}\n", d, stripped[d].weight, b.dataset(d).size(),
               stripped[d].prefix);
  fmt::print("dataset index  {}\n", head(b.dataset_index(), c.show));
  fmt::print("sample in it   {}\n", head(b.dataset_sample_index(), c.show));
  for (size_t i = 0; i < std::min(b.size(), c.show); ++i) fmt::print("sample {}: {}\n", i, head(b.sample(i), c.show));
}

void setup_samples(CLI::App& app) {
  auto c = std::make_shared<SamplesCli>();
  app.add_option("data_path", c->data_path,
                 "A dataset prefix, or a blend \"W1 PREFIX1 W2 PREFIX2 ...\" (Megatron's DATA_PATH)")
      ->required();
  app.add_option("--seq-length", c->o.sequence_length, "Tokens per sample (each sample holds one more)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--num-samples", c->o.num_samples, "Samples requested")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--seed", c->o.seed, "Megatron's --seed (numpy RandomState)")->capture_default_str();
  app.add_option("--split", c->o.split, "Megatron's --split: train,valid,test weights")->capture_default_str();
  app.add_option("--split-name", c->split_name, "Which split to sample: train, valid or test")
      ->capture_default_str();
  app.add_option("--cache-dir", c->o.cache_dir,
                 "Index cache folder (default: <dataset dir>/cache/GPTDataset_indices; '-' for none)");
  app.add_option("--show", c->show, "Entries and samples to print")->capture_default_str();
  app.add_flag("--json", c->json, "Print the indices and every requested sample as JSON");
  app.callback([c] { run_samples(*c); });
}

QK_REGISTER_DATA_COMMAND(samples, "samples",
                         "Megatron GPTDataset samples (document/sample/shuffle indices, blending)",
                         setup_samples);

// Deterministic varied text (tokenizer parity tests and benchmarks).
void setup_synth_text(CLI::App& app) {
  auto bytes = std::make_shared<size_t>(1 << 20);
  auto seed = std::make_shared<uint64_t>(1);
  app.add_option("--bytes", *bytes, "About this many bytes")->check(CLI::Range(size_t{1}, size_t{1} << 32))->capture_default_str();
  app.add_option("--seed", *seed, "Random seed")->capture_default_str();
  app.callback([bytes, seed] {
    const std::string s = qk::data::make_varied_text(*bytes, *seed);
    std::fwrite(s.data(), 1, s.size(), stdout);
  });
}

QK_REGISTER_DATA_COMMAND(synth_text, "synth-text",
                         "Write varied UTF-8 text (prose, code, numbers, many scripts) to stdout",
                         setup_synth_text);

void setup_data(CLI::App& app) {
  app.require_subcommand(1);
  auto& subs = data_commands();
  std::sort(subs.begin(), subs.end(), [](const DataCommand& a, const DataCommand& b) { return a.name < b.name; });
  for (auto& s : subs) s.setup(*app.add_subcommand(s.name, s.summary));
}

}  // namespace

QK_REGISTER_COMMAND(data, "Dataset tools: inspect, samples, ...", setup_data);

}  // namespace qk::cli
