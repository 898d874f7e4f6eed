#include "check_sections.h"

#include <fmt/format.h>

#include <cmath>

#include "qk/autograd/functions.h"
#include "qk/base/error.h"
#include "qk/base/timer.h"
#include "qk/tensor/backend.h"
#include "qk/tensor/ops/linalg.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/train/gemm_peak.h"

#ifdef QK_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif
#include <cblas.h>

namespace qk::cli {

void print_build_config() {
  fmt::print("\nBuild\n");
  fmt::print("  BLAS:          OpenBLAS ({}; kernels for {})\n", openblas_get_config(), openblas_get_corename());
#ifdef QK_HAVE_DNNL
  const dnnl_version_t* v = dnnl_version();
  fmt::print("  oneDNN:        yes ({}.{}.{})\n", v->major, v->minor, v->patch);
#else
  fmt::print("  oneDNN:        no\n");
#endif
#ifdef QK_HAVE_MPI
  fmt::print("  MPI:           yes\n");
#else
  fmt::print("  MPI:           no\n");
#endif
  // What CMake found (cmake/QkDependencies.cmake and the top-level nvcc check).
#if defined(QK_HAVE_CUDA)
  fmt::print("  CUDA:          toolkit {} found at build time; {}; {}\n", QK_CUDA_VERSION,
#if defined(QK_HAVE_CUDA_BACKEND)
             "tensor backend built (cuda devices)",
#else
             "no nvcc, so no tensor backend",
#endif
#if defined(QK_HAVE_NCCL)
             "NCCL backend built and linked into qk (collectives on cuda tensors go through NCCL)"
#else
             "NCCL not found, so no NCCL backend"
#endif
  );
#else
  fmt::print("  CUDA:          no (toolkit not found at build time, or QK_WITH_CUDA=OFF)\n");
#endif
}

void print_accelerators() {
  bool any = false;
  for (DeviceType t : {DeviceType::cuda, DeviceType::privateuse1}) {
    if (!has_backend(t)) continue;
    Backend& b = backend(t);
    for (int i = 0; i < b.device_count(); ++i) {
      any = true;
      fmt::print("  {}:        {}\n    memory:      {:.1f} GB\n", Device(t, i).str(), b.device_name(i),
                 b.total_memory(i) / 1e9);
      if (std::string more = b.device_details(i); !more.empty()) fmt::print("    details:     {}\n", more);
    }
  }
  if (!any) fmt::print("  accelerators:  none (CPU only)\n");
  if (has_backend(DeviceType::cuda) && backend(DeviceType::cuda).device_count() == 0)
    fmt::print("  cuda:          no device: {}\n", backend(DeviceType::cuda).unavailable_reason());
}

namespace {
// Median of `reps` timings of f, in seconds.
template <typename F>
double time_it(F&& f, int reps) {
  std::vector<double> ts;
  for (int i = 0; i < reps; ++i) {
    Timer t;
    f();
    ts.push_back(t.seconds());
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}
}  // namespace

void run_self_tests(int64_t n) {
  fmt::print("\nTensor self-test\n");
  // A small problem with a known answer: (A x) for A = I*2 + 1, x = 1..4.
  Tensor a = add(mul(ones({4, 4}), 1.0), mul(from_vector<float>({1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, {4, 4}), 2.0));
  Tensor x = from_vector<float>({1, 2, 3, 4}, {4, 1});
  Tensor y = matmul(a, x);
  std::vector<float> want{12, 14, 16, 18};
  QK_CHECK_AS(InternalError, y.to_vector<float>() == want, "tensor self-test failed: got ", y.str());
  Tensor w = randn({8, 8}).requires_grad_();
  sum(square(matmul(w, w))).backward();
  QK_CHECK_AS(InternalError, w.grad().defined() && std::isfinite(ops::sum(w.grad()).item<double>()),
              "autograd self-test failed");
  fmt::print("  tensor ops:    ok (shape {}, device {})\n", shape_str(y.shape()), y.device().str());
  fmt::print("  autograd:      ok\n");

  fmt::print("\nPerformance\n");
  // The GEMM peak `qk pretrain-gpt` measures MFU against (qk/train/gemm_peak.h).
  const train::GemmPeak peak = train::measure_gemm_peak(n);
  const double cpu_s = peak.seconds;
  fmt::print("  CPU matmul {}x{} f32: {:.4f} s ({:.1f} GFLOPS)\n", n, n, cpu_s, peak.flops / 1e9);
  Tensor p = randn({n, n}), q = randn({n, n});
  bool accel = false;
  for (DeviceType t : {DeviceType::cuda, DeviceType::privateuse1}) {
    if (!has_backend(t) || backend(t).device_count() == 0) continue;
    Device d(t, 0);
    try {
      Tensor pd = p.to(d), qd = q.to(d);
      ops::mm(pd, qd);
      backend(t).synchronize(0);
      double s = time_it([&] {
        ops::mm(pd, qd);
        backend(t).synchronize(0);
      }, 5);
      fmt::print("  {} matmul: {:.4f} s ({:.1f} GFLOPS), speed-up {:.1f}x\n", d.str(), s,
                 2.0 * n * n * n / s / 1e9, cpu_s / s);
      accel = true;
    } catch (const Error& e) {
      fmt::print("  {} matmul: unavailable ({})\n", d.str(), e.message());
    }
  }
  if (!accel) fmt::print("  accelerator:   none to compare with\n");
}

}  // namespace qk::cli
