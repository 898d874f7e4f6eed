#include "qk/nn/serialize.h"

namespace qk::nn {

void save(const Module& module, const std::string& path, const Metadata& metadata) {
  TensorMap tensors;
  for (const auto& item : module.state_dict()) tensors.emplace(item.key(), item.value());
  save_safetensors(path, tensors, metadata);
}

Metadata load(Module& module, const std::string& path, bool strict) {
  SafetensorsFile f = load_safetensors(path);
  NamedTensors state;
  for (auto& [k, t] : f.tensors) state.insert(k, t);
  try {
    module.load_state_dict(state, strict);
  } catch (const Error& e) {
    // Say which file did not fit the model.
    QK_THROW(ValueError, "loading '", path, "': ", e.message());
  }
  return f.metadata;
}

}  // namespace qk::nn
