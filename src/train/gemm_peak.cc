// measure_gemm_peak: the median of a few timed square products.
#include "qk/train/gemm_peak.h"

#include <algorithm>
#include <vector>

#include "qk/base/error.h"
#include "qk/base/timer.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/linalg.h"

namespace qk::train {

GemmPeak measure_gemm_peak(int64_t n, DType dtype, int reps) {
  QK_CHECK(n >= 16 && reps >= 1, "measure_gemm_peak: n must be >= 16 and reps >= 1, got ", n, " and ", reps);
  // A generator of its own: measuring must not move the training's random stream.
  Generator gen(12345);
  const Tensor a = randn({n, n}, {}, gen).to(dtype), b = randn({n, n}, {}, gen).to(dtype);
  // ops::linear (a times b transposed), the product every layer of a
  // transformer runs, so bf16 takes the path the model's bf16 layers take.
  ops::linear(a, b, Tensor());  // warm-up: packing buffers, threads
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const Timer timer;
    ops::linear(a, b, Tensor());
    t.push_back(timer.seconds());
  }
  std::sort(t.begin(), t.end());
  GemmPeak p;
  p.seconds = t[t.size() / 2];
  p.n = n;
  p.dtype = dtype;
  p.flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / std::max(p.seconds, 1e-12);
  return p;
}

}  // namespace qk::train
