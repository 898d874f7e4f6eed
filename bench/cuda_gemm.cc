// GPU matrix-multiply throughput through qianka's CUDA backend (cuBLASLt):
// the median of ITERS timed products of two random N x N matrices after 3
// untimed ones, timed with CUDA events on the current stream.
//
//   cuda_gemm [N] [DTYPE] [ITERS]      # default: 8192 bf16 10
//
// Prints one line: "qianka N DTYPE: <ms> ms, <TFLOP/s> TFLOP/s". Run by
// scripts/device-check.sh beside PyTorch's torch.mm on the same sizes.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "qk/base/error.h"
#include "qk/tensor/cuda.h"
#include "qk/tensor/cuda/stream.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/linalg.h"
#include "qk/tensor/ops/view.h"

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 8192;
  const std::string dt = argc > 2 ? argv[2] : "bf16";
  const int iters = argc > 3 ? std::atoi(argv[3]) : 10;
  if (n <= 0 || iters <= 0) {
    std::fprintf(stderr, "usage: cuda_gemm [N > 0] [DTYPE] [ITERS > 0]\n");
    return 2;
  }
  if (!qk::cuda::is_available()) {
    std::fprintf(stderr, "cuda_gemm: no CUDA device: %s\n", qk::cuda::unavailable_reason().c_str());
    return 1;
  }
  try {
    const qk::DType t = qk::parse_dtype(dt);
    const qk::Device gpu("cuda:0");
    qk::Tensor a = qk::ops::to_device(qk::ops::cast(qk::randn({n, n}), t), gpu);
    qk::Tensor b = qk::ops::to_device(qk::ops::cast(qk::randn({n, n}), t), gpu);
    for (int i = 0; i < 3; ++i) qk::ops::mm(a, b);
    std::vector<float> ms;
    for (int i = 0; i < iters; ++i) {
      qk::cuda::Event start, stop;
      start.record(qk::cuda::current_stream());
      qk::Tensor c = qk::ops::mm(a, b);
      stop.record(qk::cuda::current_stream());
      stop.synchronize();
      ms.push_back(start.elapsed_ms(stop));
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    std::printf("qianka %lld %s: %.3f ms, %.1f TFLOP/s\n", static_cast<long long>(n), dt.c_str(), med,
                2.0 * n * n * n / (med * 1e-3) / 1e12);
  } catch (const qk::Error& e) {
    std::fprintf(stderr, "cuda_gemm: %s\n", e.what());
    return 1;
  }
  return 0;
}
