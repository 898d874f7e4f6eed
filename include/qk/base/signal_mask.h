// Asynchronous signals held back from the calling thread for a scope.
//
// Note [Signals during JIT GEMM]: oneDNN's JIT f32 GEMM kernels
// (jit_avx512_common_gemm_f32, jit_avx_gemm_f32; also inside its gemm-based
// convolutions) point RSP into a heap workspace while they run. A signal
// handled on that thread meanwhile pushes its frame there and corrupts the
// heap (oneDNN issue #4845, fixed upstream in 2026 by PR #4855; Debian 12
// ships oneDNN 2.7). `qk pretrain-gpt --exit-signal-handler` crashed that
// way about one SIGTERM in five. Every call into oneDNN therefore runs with
// the asynchronous signals blocked in the calling thread; oneDNN's OpenMP
// workers are created inside such calls and inherit the mask. A signal sent
// meanwhile stays pending and is handled when the scope ends (or by another
// thread of the process that does not block it).
#pragma once

#include <signal.h>

namespace qk {

class AsyncSignalsBlocked {
 public:
  AsyncSignalsBlocked();
  ~AsyncSignalsBlocked();
  AsyncSignalsBlocked(const AsyncSignalsBlocked&) = delete;
  AsyncSignalsBlocked& operator=(const AsyncSignalsBlocked&) = delete;

 private:
  sigset_t previous_;
};

}  // namespace qk
