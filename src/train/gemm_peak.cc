// measure_gemm_peak: the fastest of a few timed square products.
#include "qk/train/gemm_peak.h"

#include <algorithm>
#include <vector>

#include "qk/base/error.h"
#include "qk/base/timer.h"
#include "qk/tensor/backend.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/linalg.h"

namespace qk::train {

GemmPeak measure_gemm_peak(int64_t n, DType dtype, int reps, Device device) {
  QK_CHECK(n >= 16 && reps >= 1, "measure_gemm_peak: n must be >= 16 and reps >= 1, got ", n, " and ", reps);
  // A generator of its own: measuring must not move the training's random stream.
  Generator gen(12345);
  const Tensor a = randn({n, n}, {}, gen).to(dtype).to(device), b = randn({n, n}, {}, gen).to(dtype).to(device);
  // A device runs the products asynchronously: each timed call waits for it.
  auto product = [&] {
    ops::linear(a, b, Tensor());
    if (!device.is_cpu()) synchronize(device);
  };
  // ops::linear (a times b transposed), the product every layer of a
  // transformer runs, so bf16 takes the path the model's bf16 layers take.
  product();  // warm-up: packing buffers, threads, oneDNN's JIT (cuBLASLt's heuristics)
  product();
  // The fastest call of at least `reps` and 0.25 s: a 1024^3 bf16 product
  // takes about 5 ms on 2 cores, and a median of 5 such calls moved by 2x
  // between runs (waking passive OpenMP threads, neighbours), which let
  // MFU read above 100%. A peak is what the machine can do: the best call.
  std::vector<double> t;
  const Timer total;
  for (int i = 0; i < reps || (total.seconds() < 0.25 && i < 200); ++i) {
    const Timer timer;
    product();
    t.push_back(timer.seconds());
  }
  GemmPeak p;
  p.seconds = *std::min_element(t.begin(), t.end());
  p.n = n;
  p.dtype = dtype;
  p.flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / std::max(p.seconds, 1e-12);
  return p;
}

}  // namespace qk::train
