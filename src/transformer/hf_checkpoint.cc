// Hugging Face model folders: config.json plus model.safetensors or shards
// listed by model.safetensors.index.json, as transformers' save_pretrained
// writes them and from_pretrained reads them.
#include "qk/transformer/hf_checkpoint.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/base/log.h"
#include "qk/tensor/generator.h"

namespace qk::transformer {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kConfig = "config.json";
constexpr const char* kWeights = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

std::string join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

std::string shard_name(size_t i, size_t n) { return fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n); }

bool is_shard_name(const std::string& name) {
  return name.size() == std::string("model-00001-of-00002.safetensors").size() && name.rfind("model-", 0) == 0 &&
         name.find("-of-") == 11 && name.ends_with(".safetensors");
}

// Removes weight files a reader could take instead of the ones just written:
// transformers prefers model.safetensors over an index, and an old index's
// shards would linger.
void remove_stale_weights(const std::string& dir, bool sharded) {
  std::error_code ec;
  if (sharded) fs::remove(join(dir, kWeights), ec);
  if (!sharded) fs::remove(join(dir, kIndex), ec);
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec) && is_shard_name(e.path().filename().string())) fs::remove(e.path(), ec);
  }
}

// Splits `tensors` (name order) into groups of at most max_bytes (a larger
// tensor gets a shard of its own).
std::vector<nn::TensorMap> plan_shards(const nn::TensorMap& tensors, int64_t max_bytes) {
  std::vector<nn::TensorMap> shards(1);
  int64_t bytes = 0;
  for (const auto& [name, t] : tensors) {
    const auto n = static_cast<int64_t>(t.nbytes());
    if (max_bytes > 0 && !shards.back().empty() && bytes + n > max_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().emplace(name, t);
    bytes += n;
  }
  return shards;
}

nn::TensorMap read_sharded(const std::string& dir) {
  const std::string index_path = join(dir, kIndex);
  json index;
  try {
    index = json::parse(read_file(index_path));
  } catch (const json::exception& e) {
    QK_THROW(ValueError, index_path, ": not valid JSON: ", e.what());
  }
  QK_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(), index_path,
           ": expected {\"weight_map\": {tensor: file, ...}}");
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [name, file] : index["weight_map"].items()) {
    QK_CHECK(file.is_string(), index_path, ": weight_map['", name, "'] must be a file name");
    const std::string f = file.get<std::string>();
    // Plain names only: an index must not point outside its folder.
    QK_CHECK(
        !f.empty() && f.find('/') == std::string::npos && f.find('\\') == std::string::npos && f != "." && f != "..",
        index_path, ": weight_map['", name, "'] = '", f, "' is not a file name in the folder");
    by_file[f].push_back(name);
  }
  QK_CHECK(!by_file.empty(), index_path, ": weight_map is empty");
  nn::TensorMap out;
  for (const auto& [file, names] : by_file) {
    const std::string path = join(dir, file);
    QK_CHECK_AS(IoError, file_exists(path), index_path, " lists '", file, "', which is missing");
    nn::SafetensorsFile shard = nn::load_safetensors(path);
    for (const std::string& name : names) {
      auto it = shard.tensors.find(name);
      QK_CHECK(it != shard.tensors.end(), index_path, " places tensor '", name, "' in ", file,
               ", which does not hold it");
      out.emplace(name, std::move(it->second));
    }
  }
  return out;
}

void require_folder(const std::string& dir) {
  QK_CHECK_AS(IoError, fs::is_directory(dir), "'", dir, "' is not a folder; expected a Hugging Face model folder ",
              "(config.json and model.safetensors)");
  QK_CHECK_AS(IoError, file_exists(join(dir, kConfig)), "'", dir,
              "' has no config.json; is it a Hugging Face model folder?");
}

// Runs fn with the default generator's state restored afterwards.
template <typename Fn>
auto keeping_default_generator(Fn&& fn) {
  Generator& g = default_generator();
  const uint64_t seed = g.seed(), offset = g.offset();
  struct Restore {
    Generator& g;
    uint64_t seed, offset;
    ~Restore() { g.set_state(seed, offset); }
  } restore{g, seed, offset};
  return fn();
}

}  // namespace

bool is_hf_folder(const std::string& dir) { return fs::is_directory(dir) && file_exists(join(dir, kConfig)); }

void export_hf(const GPTModelImpl& model, const std::string& dir, const HfExportOptions& o) {
  const TransformerConfig& c = model.config();
  const DType dtype = o.dtype.value_or(c.params_dtype);
  const std::string config_text = hf_config_json(c, o);  // refuses what the layouts cannot hold
  nn::TensorMap state;
  for (const auto& item : model.state_dict()) state.emplace(item.key(), item.value());
  const nn::TensorMap hf = megatron_to_hf(state, c, dtype);

  make_dirs(dir);
  const std::vector<nn::TensorMap> shards = plan_shards(hf, o.max_shard_bytes);
  const bool sharded = shards.size() > 1;
  remove_stale_weights(dir, sharded);
  atomic_write_file(join(dir, kConfig), config_text);
  const nn::Metadata metadata{{"format", "pt"}};
  if (!sharded) {
    nn::save_safetensors(join(dir, kWeights), hf, metadata);
    return;
  }
  json weight_map = json::object();
  int64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = shard_name(i, shards.size());
    nn::save_safetensors(join(dir, file), shards[i], metadata);
    for (const auto& [name, t] : shards[i]) {
      weight_map[name] = file;
      total += static_cast<int64_t>(t.nbytes());
    }
  }
  const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  atomic_write_file(join(dir, kIndex), index.dump(2) + "\n");
}

nn::TensorMap read_hf_weights(const std::string& dir) {
  QK_CHECK_AS(IoError, fs::is_directory(dir), "'", dir, "' is not a folder");
  if (file_exists(join(dir, kWeights))) return nn::load_safetensors(join(dir, kWeights)).tensors;
  if (file_exists(join(dir, kIndex))) return read_sharded(dir);
  QK_CHECK_AS(IoError,
              !file_exists(join(dir, "pytorch_model.bin")) && !file_exists(join(dir, "pytorch_model.bin.index.json")),
              "'", dir, "' holds PyTorch pickle weights (pytorch_model.bin), which qk does not read; convert them to ",
              "safetensors (transformers: model.save_pretrained(dir, safe_serialization=True))");
  QK_THROW(IoError, "'", dir, "' has neither ", kWeights, " nor ", kIndex);
}

HfModel load_hf(const std::string& dir, const HfImportOptions& o) {
  require_folder(dir);
  const std::string config_path = join(dir, kConfig);
  HfConfig parsed = parse_hf_config(read_file(config_path), config_path, o);
  const nn::TensorMap state = hf_to_megatron(read_hf_weights(dir), parsed.config, parsed.info.architecture, dir);
  HfModel out{parsed.config, parsed.info, GPTModel(nullptr)};
  out.model = keeping_default_generator([&] { return GPTModel(parsed.config); });
  nn::NamedTensors named;
  for (const auto& [name, t] : state) named.insert(name, t);
  out.model->load_state_dict(named, /*strict=*/true);
  QK_DEBUG("loaded {} from {}: {}", to_string(parsed.info.architecture), dir, parsed.config.summary());
  return out;
}

void load_hf_weights(GPTModelImpl& model, const std::string& dir) {
  require_folder(dir);
  const std::string config_path = join(dir, kConfig);
  const TransformerConfig& c = model.config();
  const HfConfig folder = parse_hf_config(read_file(config_path), config_path,
                                          {.dtype = c.params_dtype,
                                           .make_vocab_size_divisible_by = c.make_vocab_size_divisible_by,
                                           .seq_length = c.seq_length});
  const HfArchitecture arch = hf_architecture_for(c);
  QK_CHECK(folder.info.architecture == arch, config_path, ": the folder holds a ", to_string(folder.info.architecture),
           " model, the config is the ", to_string(arch), " layout");
  QK_CHECK(folder.config.vocab_size == c.vocab_size, config_path, ": vocab_size ", folder.config.vocab_size,
           " differs from the model's ", c.vocab_size);
  QK_CHECK(folder.config.share_embeddings_and_output_weights == c.share_embeddings_and_output_weights, config_path,
           ": tie_word_embeddings differs from the model's share_embeddings_and_output_weights");
  const nn::TensorMap state = hf_to_megatron(read_hf_weights(dir), c, arch, dir);
  nn::NamedTensors named;
  for (const auto& [name, t] : state) named.insert(name, t);
  model.load_state_dict(named, /*strict=*/true);
}

}  // namespace qk::transformer
