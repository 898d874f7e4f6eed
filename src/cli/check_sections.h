// Sections of `qk check` that depend on the layers below the CLI.
#pragma once

#include <cstdint>

namespace qk::cli {
void print_build_config();
void print_accelerators();
// Tensor self-test and CPU (and accelerator) matmul timing.
void run_self_tests(int64_t n);
}  // namespace qk::cli
