// Helpers for optimizer options <-> the number maps of a state dict.
#pragma once

#include <map>
#include <string>

#include "qk/base/error.h"

namespace qk::optim::internal {

inline double need(const std::map<std::string, double>& m, const std::string& key,
                   const char* optimizer) {
  auto it = m.find(key);
  QK_CHECK(it != m.end(), optimizer, " load_state_dict: the saved parameter group lacks '", key,
           "'; was it saved by a different optimizer?");
  return it->second;
}

}  // namespace qk::optim::internal
