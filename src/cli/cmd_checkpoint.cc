// `qk checkpoint export`: write a model in another checkpoint format.
// `qk checkpoint verify`: check every checkpoint of a folder against its
// manifest (sizes, XXH3 checksums), as a resume would.
//
//   qk checkpoint verify runs/gpt/               # a --save folder (iter_*)
//   qk checkpoint verify runs/cifar10/checkpoints   # qk train's (step-*)
//
//   qk checkpoint export --format hf --load ckpt --out hf/          # a qk pretrain-gpt --save folder
//   qk checkpoint export --format hf --load gpt2/ --out gpt2-bf16/ --dtype bf16
//   qk checkpoint export --format hf --load big/ --out big-sharded/ --max-shard-size 2GB
//
// --load: what qk::recipes::load_gpt_for_inference reads (a pre-training
// checkpoint, or a Hugging Face folder to convert its dtype and sharding).
// The padding rows of the vocabulary are dropped; the checkpoint's tokenizer
// files are copied along, so the folder is complete for transformers and
// `qk generate`.
#include <fmt/format.h>

#include <cctype>
#include <filesystem>
#include <memory>

#include "command.h"
#include "qk/base/checkpoint_dir.h"
#include "qk/base/error.h"
#include "qk/base/timer.h"
#include "qk/transformer/hf_checkpoint.h"
#include "qk/recipes/pretrained.h"

namespace qk::cli {
namespace {

struct ExportCli {
  std::string format = "hf", load, out, dtype = "auto", max_shard_size = "0";
};

constexpr std::pair<const char*, double> kSizeUnits[] = {
    {"", 1},     {"B", 1},        {"KB", 1e3},        {"MB", 1e6},
    {"GB", 1e9}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};

// "0", "500MB", "5GB", "2GiB", "123456" -> bytes (transformers' max_shard_size spelling).
int64_t parse_shard_size(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  QK_CHECK(i > 0 && std::isdigit(static_cast<unsigned char>(s[0])), "--max-shard-size '", s,
           "': expected a size such as 5GB, 500MB or 0 (one file)");
  const double value = std::stod(s.substr(0, i));
  const std::string unit = s.substr(i);
  double scale = 0;
  for (const auto& [name, factor] : kSizeUnits)
    if (unit == name) scale = factor;
  QK_CHECK(scale > 0, "--max-shard-size '", s, "': unknown unit '", unit, "'; use B, KB, MB, GB, KiB, MiB or GiB");
  return static_cast<int64_t>(value * scale);
}

void run_export(const ExportCli& c) {
  QK_CHECK(c.format == "hf", "--format '", c.format, "' is not supported; qk exports hf (Hugging Face)");
  QK_CHECK_AS(IoError, std::filesystem::exists(c.load), "--load '", c.load, "' does not exist");
  Timer timer;
  const recipes::LoadedGpt m = recipes::load_gpt_for_inference(c.load);
  transformer::HfExportOptions o;
  if (c.dtype != "auto") o.dtype = parse_dtype(c.dtype);
  o.max_shard_bytes = parse_shard_size(c.max_shard_size);
  o.eos_token_ids = m.eos_token_ids;
  o.bos_token_id = m.bos_token_id;
  if (o.eos_token_ids.empty() && m.tokenizer) {
    // config.json names the EOS id transformers' generate() stops at.
    const int32_t eod = data::load_tokenizer(*m.tokenizer)->eod();
    if (eod >= 0) o.eos_token_ids = {eod};
  }
  transformer::export_hf(*m.model, c.out, o);
  std::vector<std::string> tokenizer_files;
  if (m.tokenizer) tokenizer_files = recipes::copy_tokenizer_files(*m.tokenizer, c.out);
  const DType dtype = o.dtype.value_or(m.config.params_dtype);
  fmt::print("exported {} ({} layers, hidden {}, vocabulary {}) from {} ({}) as {} to {} in {:.1f} s{}\n",
             transformer::to_string(transformer::hf_architecture_for(m.config)), m.config.num_layers,
             m.config.hidden_size, m.config.vocab_size, m.source,
             m.format == "qk" ? fmt::format("qk pretrain-gpt, iteration {}", m.iteration) : m.format,
             dtype_name(dtype), c.out, timer.seconds(),
             !m.tokenizer ? fmt::format("; no tokenizer copied: {}", m.tokenizer_note)
             : tokenizer_files.empty()
                 ? fmt::format("; {} has no files to copy", m.tokenizer->type)
                 : fmt::format("; tokenizer: {}", fmt::join(tokenizer_files, ", ")));
}

// One line per checkpoint, oldest first, and leftovers of writes that died;
// exits 1 when one is corrupt or there is none.
void run_verify(const std::vector<std::string>& roots) {
  namespace fs = std::filesystem;
  int bad = 0;
  for (const std::string& root : roots) {
    QK_CHECK_AS(IoError, fs::is_directory(root), "qk checkpoint verify: '", root, "' is not a folder");
    const CheckpointDir dir(root);
    const std::vector<std::string> names = dir.list();
    if (names.empty()) {
      fmt::print("{}: no checkpoints (folders with a manifest.json)\n", root);
      ++bad;
    }
    for (const std::string& name : names) {
      try {
        const CheckpointInfo c = dir.verify(name);
        int64_t bytes = 0, files = 0;
        for (const auto& f : fs::directory_iterator(c.path))
          if (f.is_regular_file()) bytes += static_cast<int64_t>(f.file_size()), ++files;
        fmt::print("{}/{}: ok ({} files, {:.1f} MB)\n", root, name, files, bytes / 1e6);
      } catch (const IoError& e) {
        fmt::print("{}/{}: CORRUPT: {}\n", root, name, e.message());
        ++bad;
      }
    }
    for (const auto& f : fs::directory_iterator(root))
      if (f.is_directory() && f.path().filename().string().rfind(".tmp-", 0) == 0)
        fmt::print("{}: an unfinished write (a writer died; never read, removed by the next save)\n",
                   f.path().string());
  }
  if (bad) exit_with(1);
}

void setup_checkpoint(CLI::App& app) {
  app.require_subcommand(1);
  CLI::App* e = app.add_subcommand("export", "Write a model as a Hugging Face folder (config.json + safetensors)");
  auto c = std::make_shared<ExportCli>();
  e->add_option("--format", c->format, "Output format: hf (transformers' GPT2LMHeadModel / LlamaForCausalLM)")
      ->capture_default_str();
  e->add_option("--load", c->load,
                "The model to export: a qk pretrain-gpt --save folder (its newest checkpoint), one iter_ folder, or "
                "a Hugging Face folder")
      ->required();
  e->add_option("--out", c->out, "Folder to write (created if missing)")->required();
  e->add_option("--dtype", c->dtype, "dtype of the written weights (auto: as loaded)")
      ->check(CLI::IsMember({"auto", "f32", "bf16", "f16"}))
      ->capture_default_str();
  e->add_option("--max-shard-size", c->max_shard_size,
                "Split the weights into shards of at most this size (e.g. 5GB; 0: one model.safetensors)")
      ->capture_default_str();
  e->callback([c] { run_export(*c); });

  CLI::App* v = app.add_subcommand("verify", "Check every checkpoint in folders against their manifests");
  auto roots = std::make_shared<std::vector<std::string>>();
  v->add_option("folders", *roots, "Checkpoint folders: a qk pretrain-gpt --save folder, qk train's checkpoints/")
      ->required();
  v->callback([roots] { run_verify(*roots); });
}

}  // namespace

QK_REGISTER_COMMAND(checkpoint, "Convert model checkpoints (export --format hf) or verify them", setup_checkpoint);

}  // namespace qk::cli
