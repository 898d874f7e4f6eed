// Pool2dParams in one call, for the pooling tests: pool({2, 2}, {2, 2}, {0, 0}).
#pragma once

#include <array>
#include <cstdint>

#include "qk/tensor/ops/conv.h"

namespace qk::test {

inline ops::Pool2dParams pool(std::array<int64_t, 2> k, std::array<int64_t, 2> s,
                              std::array<int64_t, 2> pad, bool ceil = false) {
  ops::Pool2dParams p;
  p.kernel = k;
  p.stride = s;
  p.padding = pad;
  p.ceil_mode = ceil;
  return p;
}

}  // namespace qk::test
