// CPU matrix products: strided operands to BLAS without copies where the
// layout allows (f32 through oneDNN's sgemm when built with it, f64 and the
// fallback through OpenBLAS), bf16 through oneDNN's bf16 matmul where the CPU
// has it, f16 (and bf16 elsewhere) through f32, batches across threads.
#include "cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <type_traits>

#include "qk/base/env.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/ops/view.h"
#include "cpu/onednn_matmul.h"
#include "qk/base/signal_mask.h"

#if defined(QK_HAVE_DNNL) && defined(_OPENMP)
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <string>
#endif

namespace qk::cpu {

std::optional<BlasOperand> blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  // Size-1 dims may carry any stride; what matters is where elements land.
  if (cs == 1 || cols == 1) {
    int64_t ld = rows == 1 ? std::max<int64_t>(cols, 1) : rs;
    if (ld >= std::max<int64_t>(cols, 1)) return BlasOperand{false, ld};
  }
  if (rs == 1 || rows == 1) {
    int64_t ld = cols == 1 ? std::max<int64_t>(rows, 1) : cs;
    if (ld >= std::max<int64_t>(rows, 1)) return BlasOperand{true, ld};
  }
  return std::nullopt;
}

namespace {

int blas_int(int64_t v, const char* what) {
  QK_CHECK(v <= INT_MAX, "matmul: ", what, " = ", v,
           " exceeds the 32-bit BLAS interface (OpenBLAS without ILP64); split the product");
  return static_cast<int>(v);
}

}  // namespace

#if defined(QK_HAVE_DNNL) && defined(_OPENMP)
namespace {
QK_ENV_STRING(env_gemm, "QK_GEMM", "auto",
              "f32 GEMM engine: auto (oneDNN: its matmul primitive for large x.W^T products "
              "on several threads, its sgemm otherwise), sgemm (oneDNN's sgemm only) or "
              "openblas.");
enum class F32Engine { auto_, sgemm, openblas };
F32Engine f32_engine() {
  static const F32Engine e = [] {
    std::string v = env_gemm.get();
    QK_CHECK(v == "auto" || v == "onednn" || v == "sgemm" || v == "openblas", "QK_GEMM='", v,
             "': expected auto, sgemm or openblas");
    return v == "openblas" ? F32Engine::openblas
                           : v == "sgemm" ? F32Engine::sgemm : F32Engine::auto_;
  }();
  return e;
}

// Note [f32 matmul primitive]: on 2 threads oneDNN's sgemm splits A . B^T
// (the layout of every linear layer's forward) less well than its brgemm
// matmul primitive: GPT-2 124M's forward products at 256 tokens ran at
// 186-191 GFLOP/s by CPU time with sgemm and 204-213 with the primitive, and
// 256x768x3072 (fc2) at 140 against 209-213; for A . B and A^T . B sgemm
// was as fast or faster (the dW products: 198-217 against 167-211), and on
// one thread the two are equal. Below kPrimitiveFlops the primitive's
// one-off creation (a JIT per shape) is not worth it.
constexpr double kPrimitiveFlops = 2.0 * 128 * 128 * 128;
bool use_matmul_primitive(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                          float beta) {
  return f32_engine() == F32Engine::auto_ && !ta && tb && alpha == 1.0f &&
         (beta == 0.0f || beta == 1.0f) && !in_parallel_region() && num_threads() > 1 &&
         2.0 * static_cast<double>(m) * n * k >= kPrimitiveFlops;
}
}  // namespace
#endif

void init_blas() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

namespace {

template <typename T>
void blas_call(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
               int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  auto f = [](bool t) { return t ? CblasTrans : CblasNoTrans; };
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, f(ta), f(tb), blas_int(m, "M"), blas_int(n, "N"), blas_int(k, "K"),
                alpha, a, blas_int(lda, "lda"), b, blas_int(ldb, "ldb"), beta, c,
                blas_int(ldc, "ldc"));
  } else {
    cblas_dgemm(CblasRowMajor, f(ta), f(tb), blas_int(m, "M"), blas_int(n, "N"), blas_int(k, "K"),
                alpha, a, blas_int(lda, "lda"), b, blas_int(ldb, "ldb"), beta, c,
                blas_int(ldc, "ldc"));
  }
}

// Below this many flops per thread, splitting costs more than it saves
// (the 96^3 and the 128^3 below are not measured; bench/gemm_bench.cc would show it).
constexpr double kFlopsPerThread = 2.0 * 96 * 96 * 96;

}  // namespace

template <typename T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  init_blas();
#if defined(QK_HAVE_DNNL) && defined(_OPENMP)
  // f32: oneDNN's JIT sgemm. Debian's OpenBLAS falls back to its generic
  // (Prescott) kernels on CPUs it does not recognise, such as these virtual
  // Xeons, and runs up to 5x slower there (512^3 on the 2-core development
  // VM: docs/benchmarks.md, "Training step"). oneDNN
  // threads the call itself over an OpenMP team sized like our pool.
  if constexpr (std::is_same_v<T, float>) {
    if (use_matmul_primitive(ta, tb, m, n, k, alpha, beta)) {
      onednn::MatmulShape s{ta, tb, m, n, k, DType::f32, DType::f32, beta == 1.0f};
      onednn::matmul(s, a, lda, b, ldb, c, ldc);
      return;
    }
    if (f32_engine() != F32Engine::openblas) {
      omp_set_num_threads(in_parallel_region() ? 1 : num_threads());
      const AsyncSignalsBlocked no_signals;  // Note [Signals during JIT GEMM]
      dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb,
                                    beta, c, ldc);
      QK_CHECK(st == dnnl_success, "gemm: oneDNN sgemm failed with status ", static_cast<int>(st),
               " for M=", m, " N=", n, " K=", k);
      return;
    }
  }
#endif
  const double flops = 2.0 * m * n * k;
  int64_t parts = in_parallel_region() ? 1 : num_threads();
  parts = std::min<int64_t>(parts, static_cast<int64_t>(flops / kFlopsPerThread));
  // Split the longer side of C into blocks of whole 16-element panels.
  const bool split_rows = m >= n;
  const int64_t len = split_rows ? m : n;
  parts = std::min<int64_t>(parts, (len + 15) / 16);
  if (parts <= 1) {
    blas_call<T>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const int64_t panels = (len + 15) / 16;
  parallel_for(0, parts, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const int64_t s = std::min(len, panels * p / parts * 16);
      const int64_t e = std::min(len, panels * (p + 1) / parts * 16);
      if (e <= s) continue;
      if (split_rows) {  // rows [s, e) of op(A) and C
        const T* as = ta ? a + s : a + s * lda;
        blas_call<T>(ta, tb, e - s, n, k, alpha, as, lda, b, ldb, beta, c + s * ldc, ldc);
      } else {  // columns [s, e) of op(B) and C
        const T* bs = tb ? b + s * ldb : b + s;
        blas_call<T>(ta, tb, m, e - s, k, alpha, a, lda, bs, ldb, beta, c + s, ldc);
      }
    }
  });
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);

namespace {

// The stored [rows, cols] block (leading dimension ld) of a bf16 operand as
// a dense f32 matrix [rows, cols].
Tensor widen_block(const BFloat16* p, int64_t rows, int64_t cols, int64_t ld) {
  Tensor out = empty({rows, cols});
  float* o = out.data_ptr<float>();
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t r = lo; r < hi; ++r)
                   for (int64_t j = 0; j < cols; ++j)
                     o[r * cols + j] = static_cast<float>(p[r * ld + j]);
               });
  return out;
}

}  // namespace

void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda,
               const BFloat16* b, int64_t ldb, bool accumulate, void* c, DType c_dtype,
               int64_t ldc, const float* addend) {
  QK_INTERNAL_ASSERT(c_dtype == DType::f32 || c_dtype == DType::bf16);
  QK_INTERNAL_ASSERT(!(accumulate && addend != nullptr));
  if (m == 0 || n == 0) return;
  const size_t csize = dtype_size(c_dtype);
  if (k == 0) {  // an empty sum: C, the addend or zeros
    if (accumulate) return;
    for (int64_t i = 0; i < m; ++i) {
      char* row = static_cast<char*>(c) + i * ldc * csize;
      for (int64_t j = 0; j < n; ++j) {
        const float v = addend != nullptr ? addend[i * n + j] : 0.0f;
        if (c_dtype == DType::f32) reinterpret_cast<float*>(row)[j] = v;
        else reinterpret_cast<BFloat16*>(row)[j] = BFloat16(v);
      }
    }
    return;
  }
  if (onednn::has_bf16_matmul()) {
    onednn::MatmulShape s{ta, tb, m, n, k, DType::bf16, c_dtype, accumulate};
    s.has_addend = addend != nullptr;
    onednn::matmul(s, a, lda, b, ldb, c, ldc, nullptr, addend);
    return;
  }
  // No native bf16 here: widen the operands and multiply in f32 into an f32
  // C (the caller's, or a dense copy rounded at the end).
  Tensor a32 = ta ? widen_block(a, k, m, lda) : widen_block(a, m, k, lda);
  Tensor b32 = tb ? widen_block(b, n, k, ldb) : widen_block(b, k, n, ldb);
  const int64_t lda32 = ta ? m : k, ldb32 = tb ? k : n;
  Tensor c32;
  float* cp = static_cast<float*>(c);
  int64_t ldc32 = ldc;
  if (c_dtype == DType::bf16) {
    c32 = accumulate ? widen_block(static_cast<BFloat16*>(c), m, n, ldc) : empty({m, n});
    cp = c32.data_ptr<float>();
    ldc32 = n;
  }
  if (addend != nullptr)
    for (int64_t i = 0; i < m; ++i) std::copy(addend + i * n, addend + (i + 1) * n, cp + i * ldc32);
  gemm<float>(ta, tb, m, n, k, 1.0f, a32.data_ptr<float>(), lda32, b32.data_ptr<float>(), ldb32,
              accumulate || addend != nullptr ? 1.0f : 0.0f, cp, ldc32);
  if (c_dtype == DType::f32) return;
  auto* cb = static_cast<BFloat16*>(c);
  parallel_for(0, m, std::max<int64_t>(1, 16384 / n), [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      for (int64_t j = 0; j < n; ++j) cb[i * ldc + j] = BFloat16(cp[i * n + j]);
  });
}

namespace {

// Below this many flops per matrix, run whole matrices of a batch on
// different threads rather than splitting each one.
constexpr double kSplitGemmFlops = 2.0 * 128 * 128 * 128;

// A [B, R, C] operand as BLAS sees it: a pointer, a batch stride and a layout.
template <typename T>
struct Batched {
  Tensor keep;  // owns a copy when one was needed
  const T* data;
  int64_t batch_stride;
  BlasOperand op;
};

template <typename T>
Batched<T> as_blas(const Tensor& t) {
  int64_t rows = t.size(1), cols = t.size(2);
  if (auto l = blas_layout(rows, cols, t.stride(1), t.stride(2)))
    return {t, t.data_ptr<T>(), t.stride(0), *l};
  Tensor c = ops::contiguous(t);
  return {c, c.data_ptr<T>(), rows * cols, BlasOperand{false, std::max<int64_t>(cols, 1)}};
}

// Runs gemm_one(i) for each matrix i of a batch of `batch` products of
// `flops` each: one after another (each one threaded) when they are large,
// whole matrices on different threads when they are small.
template <typename F>
void for_each_matrix(int64_t batch, double flops, F&& gemm_one) {
  if (batch == 1 || flops >= kSplitGemmFlops || in_parallel_region()) {
    for (int64_t i = 0; i < batch; ++i) gemm_one(i);
    return;
  }
  // Grain: not measured (docs/tensor.md, "Threads").
  int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(65536.0 / flops));
  parallel_for(0, batch, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) gemm_one(i);
  });
}

// out [B,M,N] (contiguous) = a [B,M,K] x b [B,K,N], float or double.
template <typename T>
void bmm_into(const Tensor& a, const Tensor& b, const Tensor& out, T beta) {
  const int64_t batch = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
  if (batch == 0 || m == 0 || n == 0) return;
  T* c = out.data_ptr<T>();
  if (k == 0) {
    if (beta == T(0)) std::memset(c, 0, sizeof(T) * batch * m * n);
    return;
  }
  Batched<T> A = as_blas<T>(a), B = as_blas<T>(b);
  for_each_matrix(batch, 2.0 * m * n * k, [&](int64_t i) {
    gemm<T>(A.op.trans, B.op.trans, m, n, k, T(1), A.data + i * A.batch_stride, A.op.ld,
            B.data + i * B.batch_stride, B.op.ld, beta, c + i * m * n, n);
  });
}

// bf16 a [B,M,K] x b [B,K,N] (+ bias [N]) -> bf16 [B,M,N] through oneDNN's
// bf16 matmul (has_bf16_matmul()): f32 accumulation, one rounding at the end.
Tensor bmm_bf16(const Tensor& a, const Tensor& b, const Tensor& bias) {
  const int64_t batch = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
  Tensor out = empty({batch, m, n}, TensorOptions(DType::bf16).device(a.device()));
  if (out.numel() == 0) return out;
  if (k == 0) {  // an empty sum: the bias alone
    if (bias.defined()) out.copy_(bias);
    else out.zero_();
    return out;
  }
  Batched<BFloat16> A = as_blas<BFloat16>(a), B = as_blas<BFloat16>(b);
  Tensor bias_c = bias.defined() ? ops::contiguous(bias) : Tensor();
  onednn::MatmulShape s{A.op.trans, B.op.trans, m, n, k, DType::bf16, DType::bf16};
  s.has_bias = bias.defined();
  s.bias = bias.defined() ? bias.dtype() : DType::f32;
  BFloat16* c = out.data_ptr<BFloat16>();
  for_each_matrix(batch, 2.0 * m * n * k, [&](int64_t i) {
    onednn::matmul(s, A.data + i * A.batch_stride, A.op.ld, B.data + i * B.batch_stride, B.op.ld,
                   c + i * m * n, n, bias_c.defined() ? bias_c.raw_data() : nullptr);
  });
  return out;
}

// Reduced floats multiply in f32 (f32 accumulation) and round once at the end.
Tensor bmm_any(const Tensor& a, const Tensor& b, const Tensor& bias_rows) {
  const int64_t batch = a.size(0), m = a.size(1), n = b.size(2);
  DType dt = a.dtype();
  if (dt == DType::bf16 && onednn::has_bf16_matmul() &&
      (!bias_rows.defined() || bias_rows.dtype() == DType::bf16 ||
       bias_rows.dtype() == DType::f32))
    return bmm_bf16(a, b, bias_rows);
  if (is_reduced_float(dt)) {
    Tensor bias32 = bias_rows.defined() ? ops::cast(bias_rows, DType::f32) : Tensor();
    return ops::cast(bmm_any(ops::cast(a, DType::f32), ops::cast(b, DType::f32), bias32), dt);
  }
  Tensor out = empty({batch, m, n}, TensorOptions(dt).device(a.device()));
  bool has_bias = bias_rows.defined();
  if (has_bias) out.copy_(bias_rows);  // broadcast [N] over every row, then beta = 1
  if (dt == DType::f32) {
    bmm_into<float>(a, b, out, has_bias ? 1.0f : 0.0f);
  } else if (dt == DType::f64) {
    bmm_into<double>(a, b, out, has_bias ? 1.0 : 0.0);
  } else {
    QK_THROW(TypeError, "matmul: expected a floating-point tensor, got ", dtype_name(dt));
  }
  return out;
}

}  // namespace

Tensor bmm(const Tensor& a, const Tensor& b) { return bmm_any(a, b, Tensor()); }

Tensor mm(const Tensor& a, const Tensor& b) {
  Tensor out = bmm_any(ops::unsqueeze(a, 0), ops::unsqueeze(b, 0), Tensor());
  return ops::squeeze(out, 0);
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  // x [R,in] . w^T [in,out]: w^T is a column-major view, passed with trans.
  Tensor out = bmm_any(ops::unsqueeze(x, 0), ops::unsqueeze(ops::transpose(w, 0, 1), 0), bias);
  return ops::squeeze(out, 0);
}

}  // namespace qk::cpu
