// The registry's entry for a filled Library, shared by define_library and
// the plugin loader.
#pragma once

#include <string>
#include <vector>

#include "qk/plugin/library.h"

namespace qk::plugin::detail {

// Moves lib's ops into the registry, all or none (ValueError naming both
// origins for an op registered before, or an op without a kernel).
// Returns their qualified names.
std::vector<std::string> register_library(Library& lib, const std::string& origin);

}  // namespace qk::plugin::detail
