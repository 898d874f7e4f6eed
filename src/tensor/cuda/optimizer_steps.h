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

// The same over `count` (at most kMultiTensorMax, multi_tensor.h) tensors of
// one dtype in one launch: ptrs[k][i] is list k's pointer for tensor i, with
// n[i] elements; SGD's lists are params, grads, momentum buffers (ptrs[2]
// null without momentum), Adam's params, grads, exp_avg, exp_avg_sq,
// max_exp_avg_sq (ptrs[4] null unless amsgrad).
void launch_multi_sgd_step(bool f64, void* const* const* ptrs, const int64_t* n, int count, const SgdConsts& c,
                           cudaStream_t s);
void launch_multi_adam_step(bool f64, void* const* const* ptrs, const int64_t* n, int count, const AdamConsts& c,
                            cudaStream_t s);

}  // namespace qk::cuda
