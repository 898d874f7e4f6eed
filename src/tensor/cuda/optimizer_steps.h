// The optimizers' fused CUDA steps (optimizer_steps.cu): one pass over each
// parameter's memory, the CPU kernels' arithmetic (cpu/optimizer_steps.cc).
// Plain data only: the .cu is compiled by nvcc as C++17.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace qk::cuda {

struct SgdConsts {
  double lr, weight_decay, momentum, damp;  // damp = 1 - dampening
  bool momentum_on, nesterov, first_step;
};
// buf: null without momentum.
void launch_sgd_step(bool f64, void* p, const void* g, void* buf, int64_t n, const SgdConsts& c, cudaStream_t s);

struct AdamConsts {
  double step_size, inv_bc2_sqrt, b1, b2, omb1, omb2, eps, wd, decay;
  bool decoupled, amsgrad;
};
// vmax: null unless amsgrad.
void launch_adam_step(bool f64, void* p, const void* g, void* m, void* v, void* vmax, int64_t n, const AdamConsts& c,
                      cudaStream_t s);

}  // namespace qk::cuda
