// The matrix-multiply rate this process gets here and now: what `qk check`
// reports and what `qk pretrain-gpt` measures MFU against (achieved FLOP/s
// of a training step over this peak).
//
//   qk::train::GemmPeak p = qk::train::measure_gemm_peak();   // 1024^3 f32, ~0.1-0.3 s
//   fmt::print("{:.1f} GFLOP/s\n", p.flops / 1e9);
#pragma once

#include <cstdint>

#include "qk/tensor/device.h"
#include "qk/tensor/dtype.h"

namespace qk::train {

struct GemmPeak {
  double flops = 0;    // 2 n^3 / the fastest time
  double seconds = 0;  // the fastest time of one n x n x n product
  int64_t n = 0;
  DType dtype = DType::f32;
};

// The fastest of at least `reps` (and 0.25 s of) timed n x n by n x n
// products of random matrices in `dtype` (after two untimed warm-ups), on
// this process's compute threads,
// through ops::linear as the model's layers call it.
// On `device` (a GPU: each call timed to its end, synchronize()).
GemmPeak measure_gemm_peak(int64_t n = 1024, DType dtype = DType::f32, int reps = 5, Device device = kCPU);

}  // namespace qk::train
