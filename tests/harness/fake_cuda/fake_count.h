// The fake runtime's counter, shared by its files (fake_cuda_runtime.cc: the
// runtime and cuBLASLt; fake_cudnn.cc: cuDNN). Not for tests: they read
// counts() (fake_cuda_runtime.h).
#pragma once

#include <cstdint>

#include "harness/fake_cuda/fake_cuda_runtime.h"

namespace qk::fake_cuda {

// Counts one call; `field` the counter it adds to besides runtime_calls
// (with `call` false, only that: a second counter of the same call).
// During a capture, device work is recorded for the graph's launches.
void count(int64_t Counts::*field = nullptr, bool call = true);

}  // namespace qk::fake_cuda
