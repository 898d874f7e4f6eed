// Matrix products on CUDA through cuBLASLt: mm, bmm and linear for f32
// (TF32 only when qk::cuda::set_matmul_allow_tf32(true), as PyTorch's
// allow_tf32), f64, f16 and bf16 (f32 accumulation, as the CPU's).
//
// Row-major C[M,N] = A[M,K] B[K,N] is column-major C^T = B^T A^T, so
// cuBLASLt gets B as its first operand and A as its second. An operand that
// is row-major in memory (last stride 1) is already the transpose cuBLASLt
// wants (op N); a transposed view (second-to-last stride 1, as w.t() in
// linear) is passed as it is with op T. Anything else is copied contiguous.
#include <cublasLt.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda_check.h"
#include "gemm.h"
#include "op_kernel_tables.h"
#include "plan_cache.h"
#include "stream_handle.h"
#include "qk/base/error.h"
#include "qk/tensor/cuda.h"
#include "qk/tensor/kernel_tables.h"
#include "qk/tensor/ops/view.h"
#include "qk/tensor/tensor.h"

namespace qk::cuda {

namespace {

[[noreturn]] void throw_lt_error(cublasStatus_t st, const char* call, const char* file, int line) {
  throw DeviceError(std::string("cuBLASLt call ") + call + " failed: " + cublasLtGetStatusName(st) + " (" +
                        cublasLtGetStatusString(st) + ")",
                    file, line);
}
#define QK_LT_CHECK(call)                                                                 \
  do {                                                                                    \
    cublasStatus_t qk_lt_st_ = (call);                                                    \
    if (qk_lt_st_ != CUBLAS_STATUS_SUCCESS) throw_lt_error(qk_lt_st_, #call, __FILE__, __LINE__); \
  } while (0)

// One handle per device, made on first use (cuBLASLt handles are thread-safe).
cublasLtHandle_t handle(int device) {
  static std::mutex mu;
  static std::vector<cublasLtHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<size_t>(device) >= handles.size()) handles.resize(device + 1, nullptr);
  if (!handles[device]) QK_LT_CHECK(cublasLtCreate(&handles[device]));
  return handles[device];
}

// RAII for cuBLASLt's descriptors.
struct OpDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~OpDesc() { if (d) cublasLtMatmulDescDestroy(d); }
};
struct LayoutDesc {
  cublasLtMatrixLayout_t d = nullptr;
  ~LayoutDesc() { if (d) cublasLtMatrixLayoutDestroy(d); }
};
struct PrefDesc {
  cublasLtMatmulPreference_t d = nullptr;
  ~PrefDesc() { if (d) cublasLtMatmulPreferenceDestroy(d); }
};

// One side of the product as cuBLASLt sees it.
struct Operand {
  Tensor t;              // keeps a contiguous copy alive
  bool transposed;       // stored column-major: pass with op T
  int64_t rows, cols;    // of the stored column-major matrix
  int64_t ld, batch_stride;
};

// m: [.., R, C] (2-D, or 3-D with a batch).
Operand as_operand(Tensor m) {
  const int64_t R = m.size(-2), C = m.size(-1);
  auto batch_stride = [&](const Tensor& t) { return t.dim() == 3 && t.size(0) > 1 ? t.stride(0) : 0; };
  if (m.stride(-1) == 1 && m.stride(-2) >= std::max<int64_t>(C, 1))
    return {m, false, C, R, m.stride(-2), batch_stride(m)};
  if (m.stride(-2) == 1 && m.stride(-1) >= std::max<int64_t>(R, 1))
    return {m, true, R, C, m.stride(-1), batch_stride(m)};
  Tensor c = ops::contiguous(m);
  return {c, false, C, R, std::max<int64_t>(C, 1), batch_stride(c)};
}

cudaDataType_t data_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f64: return CUDA_R_64F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: break;
  }
  QK_THROW(TypeError, "matmul on CUDA: ", dtype_name(t), " is not supported (f32, f64, f16, bf16)");
}

// The largest power of two (at most 256) that divides the address.
uint32_t alignment(const void* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

constexpr size_t kWorkspaceBytes = 32 << 20;  // what PyTorch gives cuBLASLt on Hopper

// A GEMM shape's descriptors and cuBLASLt's algorithm for it, built once
// (plan_cache.h): the heuristic query and descriptor set-up cost more host
// time than launching a small product.
struct GemmPlan {
  OpDesc op;
  LayoutDesc first, second, result;
  cublasLtMatmulAlgo_t algo{};
};

PlanCache<GemmPlan>& gemm_plans() {
  static PlanCache<GemmPlan> cache("cublaslt_matmul");
  return cache;
}

}  // namespace

void gemm(const Tensor& out, const Tensor& a, const Tensor& bm, int64_t batch, bool accumulate) {
  const int64_t M = a.size(-2), K = a.size(-1), N = bm.size(-1);
  if (out.numel() == 0) return;
  const int device = a.device().index;
  DeviceStream ds(device);
  if (K == 0) {  // an empty sum: zeros (or out as it is)
    if (!accumulate) ops::fill_kernel.get(out.device())(out, 0.0);
    return;
  }
  Operand A = as_operand(a), B = as_operand(bm);
  const DType dt = a.dtype();
  const cudaDataType_t type = data_type(dt);
  QK_INTERNAL_ASSERT(out.dtype() == dt || (out.dtype() == DType::f32 && (dt == DType::bf16 || dt == DType::f16)),
                     "gemm: ", dtype_name(dt), " operands into ", dtype_name(out.dtype()));
  const cudaDataType_t out_type = data_type(out.dtype());
  const bool f64 = dt == DType::f64;
  cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  if (dt == DType::f32 && matmul_allow_tf32()) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  const cudaDataType_t scale = f64 ? CUDA_R_64F : CUDA_R_32F;

  const uint32_t al_first = alignment(B.t.raw_data()), al_second = alignment(A.t.raw_data()),
                 al_out = alignment(out.raw_data());
  // Everything the descriptors and cuBLASLt's choice of algorithm depend on.
  const PlanKey key{device,         static_cast<int64_t>(dt), static_cast<int64_t>(out.dtype()), compute, M, N, K,
                    batch,          B.transposed, A.transposed, B.rows, B.cols, B.ld, B.batch_stride,
                    A.rows,         A.cols,       A.ld,         A.batch_stride, al_first, al_second, al_out};
  cublasLtHandle_t h = handle(device);
  const GemmPlan& plan = gemm_plans().get(key, [&] {
    auto pl = std::make_unique<GemmPlan>();
    QK_LT_CHECK(cublasLtMatmulDescCreate(&pl->op.d, compute, scale));
    // cuBLASLt's first operand is B, its second A (see the top of the file).
    cublasOperation_t op_first = B.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_second = A.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    QK_LT_CHECK(cublasLtMatmulDescSetAttribute(pl->op.d, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first));
    QK_LT_CHECK(cublasLtMatmulDescSetAttribute(pl->op.d, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second));
    QK_LT_CHECK(cublasLtMatrixLayoutCreate(&pl->first.d, type, B.rows, B.cols, B.ld));
    QK_LT_CHECK(cublasLtMatrixLayoutCreate(&pl->second.d, type, A.rows, A.cols, A.ld));
    QK_LT_CHECK(cublasLtMatrixLayoutCreate(&pl->result.d, out_type, N, M, N));
    if (batch > 1) {
      const int32_t count = static_cast<int32_t>(batch);
      const int64_t out_stride = M * N;
      for (auto [desc, stride] : {std::pair{pl->first.d, B.batch_stride}, std::pair{pl->second.d, A.batch_stride},
                                  std::pair{pl->result.d, out_stride}}) {
        QK_LT_CHECK(cublasLtMatrixLayoutSetAttribute(desc, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        QK_LT_CHECK(cublasLtMatrixLayoutSetAttribute(desc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                     sizeof stride));
      }
    }
    PrefDesc pref;
    QK_LT_CHECK(cublasLtMatmulPreferenceCreate(&pref.d));
    const uint64_t ws = kWorkspaceBytes;
    QK_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    QK_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_first,
                                                     sizeof al_first));
    QK_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_second,
                                                     sizeof al_second));
    QK_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_out,
                                                     sizeof al_out));
    QK_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_out,
                                                     sizeof al_out));
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    QK_LT_CHECK(cublasLtMatmulAlgoGetHeuristic(h, pl->op.d, pl->first.d, pl->second.d, pl->result.d, pl->result.d,
                                               pref.d, 1, &heuristic, &found));
    QK_CHECK_DEVICE(found > 0, "matmul on ", out.device().str(), ": cuBLASLt has no algorithm for ", dtype_name(dt),
                    " [", M, ",", K, "] x [", K, ",", N, "]", batch > 1 ? " batched" : "");
    pl->algo = heuristic.algo;
    return pl;
  });
  Tensor workspace = empty({static_cast<int64_t>(kWorkspaceBytes)}, TensorOptions().dtype(DType::u8).device(out.device()));
  const double one64 = 1, zero64 = 0;
  const float one32 = 1, zero32 = 0;
  const void* alpha = f64 ? static_cast<const void*>(&one64) : &one32;
  const void* beta = accumulate ? alpha : f64 ? static_cast<const void*>(&zero64) : &zero32;
  QK_LT_CHECK(cublasLtMatmul(h, plan.op.d, alpha, B.t.raw_data(), plan.first.d, A.t.raw_data(), plan.second.d, beta,
                             out.raw_data(), plan.result.d, out.raw_data(), plan.result.d, &plan.algo,
                             workspace.raw_data(), kWorkspaceBytes, ds.stream()));
}

namespace {

Tensor mm_on_device(const Tensor& a, const Tensor& b) {
  Tensor out = empty({a.size(0), b.size(1)}, TensorOptions().dtype(a.dtype()).device(a.device()));
  gemm(out, a, b, 1);
  return out;
}

Tensor bmm_on_device(const Tensor& a, const Tensor& b) {
  Tensor out = empty({a.size(0), a.size(1), b.size(2)}, TensorOptions().dtype(a.dtype()).device(a.device()));
  if (a.size(0) == 1) {
    gemm(out, ops::select(a, 0, 0), ops::select(b, 0, 0), 1);
    return out;
  }
  gemm(out, a, b, a.size(0));
  return out;
}

// x [R, in], w [out, in], b [out] or undefined.
Tensor linear_on_device(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor y = empty({x.size(0), w.size(0)}, TensorOptions().dtype(x.dtype()).device(x.device()));
  gemm(y, x, ops::transpose(w, 0, 1), 1);
  if (b.defined() && y.numel() > 0) ops::binary_kernel.get(y.device())(BinaryOp::add, y, y, b);
  return y;
}

// Grouped products (MoE experts) as one cuBLASLt product per group, each
// written in place into its row block of the output (row blocks of a
// row-major [M, N] keep its leading dimension). Megatron without
// --moe-grouped-gemm runs the same loop; a grouped-GEMM kernel (CUTLASS's,
// cuBLAS's grouped batched API) is the faster form (docs/cuda.md).
Tensor grouped_mm_on_device(const Tensor& a, const std::vector<int64_t>& rows, const std::vector<Tensor>& b,
                            bool trans_b, const std::vector<Tensor>& bias) {
  const int64_t N = b.empty() ? 0 : (trans_b ? b[0].size(0) : b[0].size(1));
  Tensor out = empty({a.size(0), N}, TensorOptions().dtype(a.dtype()).device(a.device()));
  int64_t r0 = 0;
  for (size_t g = 0; g < rows.size(); ++g) {
    const int64_t r1 = r0 + rows[g];
    if (rows[g] > 0) {
      Tensor y = ops::slice(out, 0, r0, r1);
      gemm(y, ops::slice(a, 0, r0, r1), trans_b ? ops::transpose(b[g], 0, 1) : b[g], 1);
      if (!bias.empty() && y.numel() > 0) ops::binary_kernel.get(y.device())(BinaryOp::add, y, y, bias[g]);
    }
    r0 = r1;
  }
  return out;
}

// a_g^T . b_g per group: the transposed row block goes in as op T, no copy.
std::vector<Tensor> grouped_mm_tn_on_device(const Tensor& a, const Tensor& b, const std::vector<int64_t>& rows) {
  std::vector<Tensor> out;
  out.reserve(rows.size());
  int64_t r0 = 0;
  for (int64_t r : rows) {
    Tensor o = empty({a.size(1), b.size(1)}, TensorOptions().dtype(a.dtype()).device(a.device()));
    gemm(o, ops::transpose(ops::slice(a, 0, r0, r0 + r), 0, 1), ops::slice(b, 0, r0, r0 + r), 1);  // K = 0: zeros
    out.push_back(std::move(o));
    r0 += r;
  }
  return out;
}

[[maybe_unused]] const bool registered = [] {
  ops::grouped_mm_kernel.set(DeviceType::cuda, &grouped_mm_on_device);
  ops::grouped_mm_tn_kernel.set(DeviceType::cuda, &grouped_mm_tn_on_device);
  ops::mm_kernel.set(DeviceType::cuda, &mm_on_device);
  ops::bmm_kernel.set(DeviceType::cuda, &bmm_on_device);
  ops::linear_kernel.set(DeviceType::cuda, &linear_on_device);
  return true;
}();

}  // namespace

}  // namespace qk::cuda
