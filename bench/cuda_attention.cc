// Flash attention on the GPU through qianka's CUDA backend, at the shapes of
// bench/sdpa_cuda_peer.py (PyTorch's scaled_dot_product_attention, causal,
// bf16): forward, and forward + backward, the mean of 20 timed calls after
// 3 untimed ones, timed with CUDA events on the current stream.
//
//   cuda_attention             # prints one JSON line per shape, as the peer
//
// TFLOP/s counts the causal half: forward 4*B*H*T*T*D/2, forward+backward
// 3.5x that (PyTorch's convention in the peer). Run by scripts/device-check.sh,
// once per QK_CUDA_ATTENTION (auto: cuDNN's fused attention where it takes
// the call; cudnn; tiled: qk's tensor-core kernels), which each line names.
// First it checks the GPU's out, dq, dk and dv at the trainer's sequence
// length (T 1024, head dims 64 and 128, grouped-query heads) against the
// CPU's kernel on the same bf16 inputs, and fails if they differ by more
// than bf16 rounding explains (the op harness checks short sequences).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "qk/base/error.h"
#include "qk/tensor/cuda.h"
#include "qk/tensor/cuda/stream.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/attention.h"
#include "qk/tensor/ops/view.h"

namespace {

struct Shape {
  int64_t B, H, T, D;
};

template <typename F>
double mean_ms(F f, int iters) {
  for (int i = 0; i < 3; ++i) f();
  qk::cuda::Event start, stop;
  start.record(qk::cuda::current_stream());
  for (int i = 0; i < iters; ++i) f();
  stop.record(qk::cuda::current_stream());
  stop.synchronize();
  return start.elapsed_ms(stop) / iters;
}

// max |gpu - cpu| / max |cpu| over the four results of one shape.
double relative_error(int64_t B, int64_t Hq, int64_t Hkv, int64_t T, int64_t D) {
  const qk::Device gpu("cuda:0");
  qk::Generator g(7);
  auto rand = [&](int64_t H) { return qk::ops::cast(qk::randn({B, T, H, D}, {}, g), qk::DType::bf16); };
  const qk::Tensor q = rand(Hq), k = rand(Hkv), v = rand(Hkv), dout = rand(Hq);
  const qk::ops::FlashAttentionParams p;  // causal
  auto run = [&](const qk::Device& d) {
    const qk::Tensor qd = qk::ops::to_device(q, d), kd = qk::ops::to_device(k, d), vd = qk::ops::to_device(v, d);
    const qk::ops::FlashAttentionResult r = qk::ops::flash_attention(qd, kd, vd, p);
    auto [dq, dk, dv] = qk::ops::flash_attention_backward(qk::ops::to_device(dout, d), qd, kd, vd, r.out, r.lse, p);
    return std::vector<qk::Tensor>{r.out, dq, dk, dv};
  };
  const std::vector<qk::Tensor> want = run(qk::Device("cpu")), got = run(gpu);
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const std::vector<float> w = want[i].to_vector<float>(), h = got[i].to_vector<float>();
    double diff = 0, scale = 0;
    for (size_t j = 0; j < w.size(); ++j) {
      diff = std::max(diff, static_cast<double>(std::fabs(w[j] - h[j])));
      scale = std::max(scale, static_cast<double>(std::fabs(w[j])));
    }
    worst = std::max(worst, scale > 0 ? diff / scale : diff);
  }
  return worst;
}

}  // namespace

int main() {
  if (!qk::cuda::is_available()) {
    std::fprintf(stderr, "cuda_attention: no CUDA device: %s\n", qk::cuda::unavailable_reason().c_str());
    return 1;
  }
  const char* env = std::getenv("QK_CUDA_ATTENTION");
  const std::string path = env && *env ? env : "auto";
  try {
    bool wrong = false;
    for (const int64_t D : {int64_t{64}, int64_t{128}}) {
      const double e = relative_error(1, 4, 2, 1024, D);
      std::printf("{\"path\": \"%s\", \"check\": \"out, dq, dk, dv against the CPU\", \"B\": 1, \"Hq\": 4, "
                  "\"Hkv\": 2, \"T\": 1024, \"D\": %lld, \"max_relative_error\": %.2e}\n",
                  path.c_str(), static_cast<long long>(D), e);
      wrong = wrong || !(e < 2e-2);
    }
    if (wrong) {
      std::fprintf(stderr, "cuda_attention: the GPU's attention differs from the CPU's by more than bf16 rounding\n");
      return 1;
    }
    const qk::Device gpu("cuda:0");
    for (const Shape s : {Shape{4, 8, 1024, 64}, Shape{16, 12, 1024, 64}, Shape{16, 8, 1024, 64},
                          Shape{4, 16, 4096, 128}}) {
      auto rand = [&] { return qk::ops::to_device(qk::ops::cast(qk::randn({s.B, s.T, s.H, s.D}), qk::DType::bf16), gpu); };
      const qk::Tensor q = rand(), k = rand(), v = rand(), dout = rand();
      const qk::ops::FlashAttentionParams p;  // causal
      const double fwd = mean_ms([&] { (void)qk::ops::flash_attention(q, k, v, p); }, 20);
      const double fwd_bwd = mean_ms(
          [&] {
            const qk::ops::FlashAttentionResult r = qk::ops::flash_attention(q, k, v, p);
            (void)qk::ops::flash_attention_backward(dout, q, k, v, r.out, r.lse, p);
          },
          20);
      const double flops = 4.0 * s.B * s.H * s.T * s.T * s.D / 2;
      std::printf("{\"path\": \"%s\", \"B\": %lld, \"H\": %lld, \"T\": %lld, \"D\": %lld, \"fwd\": {\"ms\": %.3f, \"tflops\": %.1f}, "
                  "\"fwd_bwd\": {\"ms\": %.3f, \"tflops\": %.1f}}\n",
                  path.c_str(), static_cast<long long>(s.B), static_cast<long long>(s.H), static_cast<long long>(s.T),
                  static_cast<long long>(s.D), fwd, flops / fwd / 1e9, fwd_bwd, 3.5 * flops / fwd_bwd / 1e9);
      std::fflush(stdout);
    }
  } catch (const qk::Error& e) {
    std::fprintf(stderr, "cuda_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
