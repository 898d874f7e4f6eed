// Flash attention on the GPU through qianka's CUDA backend, at the shapes of
// bench/sdpa_cuda_peer.py (PyTorch's scaled_dot_product_attention, causal,
// bf16): forward, and forward + backward, the mean of 20 timed calls after
// 3 untimed ones, timed with CUDA events on the current stream.
//
//   cuda_attention             # prints one JSON line per shape, as the peer
//
// TFLOP/s counts the causal half: forward 4*B*H*T*T*D/2, forward+backward
// 3.5x that (PyTorch's convention in the peer). Run by scripts/device-check.sh.
#include <cstdio>

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

}  // namespace

int main() {
  if (!qk::cuda::is_available()) {
    std::fprintf(stderr, "cuda_attention: no CUDA device: %s\n", qk::cuda::unavailable_reason().c_str());
    return 1;
  }
  try {
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
      std::printf("{\"B\": %lld, \"H\": %lld, \"T\": %lld, \"D\": %lld, \"fwd\": {\"ms\": %.3f, \"tflops\": %.1f}, "
                  "\"fwd_bwd\": {\"ms\": %.3f, \"tflops\": %.1f}}\n",
                  static_cast<long long>(s.B), static_cast<long long>(s.H), static_cast<long long>(s.T),
                  static_cast<long long>(s.D), fwd, flops / fwd / 1e9, fwd_bwd, 3.5 * flops / fwd_bwd / 1e9);
      std::fflush(stdout);
    }
  } catch (const qk::Error& e) {
    std::fprintf(stderr, "cuda_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
