// Command lines as string vectors, joined with +: practice_model() + Argv{"--bf16"}.
#pragma once

#include <string>
#include <vector>

namespace qk::test {

using Argv = std::vector<std::string>;

inline Argv operator+(Argv a, const Argv& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace qk::test
