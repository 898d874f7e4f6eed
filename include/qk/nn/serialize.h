// Module checkpoints as safetensors files (readable by PyTorch's safetensors).
//
//   qk::nn::save(*model, "model.safetensors");
//   qk::nn::load(*model, "model.safetensors");            // strict: all keys must match
//   qk::nn::load(*model, "backbone.safetensors", false);  // only the common keys
//
// Keys are the state_dict's dotted names ("features.0.weight"); a model
// written by PyTorch with the same structure loads directly.
#pragma once

#include <string>

#include "qk/nn/module.h"
#include "qk/nn/safetensors.h"

namespace qk::nn {

void save(const Module& module, const std::string& path, const Metadata& metadata = {});
// Returns the file's metadata.
Metadata load(Module& module, const std::string& path, bool strict = true);

}  // namespace qk::nn
