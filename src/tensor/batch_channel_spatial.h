// A tensor [N, C, ...] seen as [N, C, S] (S: the product of the trailing
// dims): the layout of batch norm and cross entropy, on every backend.
#pragma once

#include <cstdint>

#include "qk/tensor/tensor.h"

namespace qk {

struct NCS {
  int64_t N, C, S;
};

inline NCS ncs_of(const Tensor& t) {
  NCS d{t.size(0), t.size(1), 1};
  for (int64_t i = 2; i < t.dim(); ++i) d.S *= t.size(i);
  return d;
}

}  // namespace qk
