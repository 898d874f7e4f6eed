// oneDNN matmul primitives with a per-problem cache (see onednn_matmul.h).
#include "cpu/onednn_matmul.h"

#include "qk/base/env.h"
#include "qk/base/error.h"
#include "qk/base/signal_mask.h"

#if defined(QK_HAVE_DNNL) && defined(_OPENMP)

#include <omp.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "cpu/onednn_dtype.h"

#include "qk/base/thread_pool.h"
#include "qk/tensor/tensor.h"

namespace qk::cpu::onednn {

namespace {

using dnnl::memory;
using Dims = memory::dims;

QK_ENV_STRING(env_gemm_bf16, "QK_GEMM_BF16", "auto",
              "bf16 matrix products: auto (oneDNN's bf16 matmul where the CPU has AVX512-BF16 "
              "or AMX, else through f32), onednn (oneDNN's bf16 matmul on any CPU; slow "
              "reference kernels without those) or f32 (convert to f32 and multiply).");

const dnnl::engine* engine() {
  static const dnnl::engine* eng = []() -> const dnnl::engine* {
    try {
      return new dnnl::engine(dnnl::engine::kind::cpu, 0);
    } catch (const dnnl::error&) {
      return nullptr;
    }
  }();
  return eng;
}

// CPU streams execute in the calling thread; one per thread keeps callers
// on different threads (a GEMM per sample in a parallel_for) independent.
dnnl::stream& stream() {
  thread_local dnnl::stream s(*engine());
  return s;
}

// A [rows, cols] matrix stored row-major with leading dimension ld, or (when
// trans) the transpose of a row-major [cols, rows]: oneDNN takes both as strides.
memory::desc matrix_md(int64_t rows, int64_t cols, bool trans, int64_t ld, DType dt) {
  const Dims strides = trans ? Dims{1, ld} : Dims{ld, 1};
  return memory::desc({rows, cols}, dnnl_type(dt), strides);
}

struct MatmulEntry {
  dnnl::matmul prim;
  memory::desc a, b, c, bias, addend, pad;
  std::string impl;
};

using MatmulKey = std::array<int64_t, 14>;

MatmulKey make_key(const MatmulShape& s, int64_t lda, int64_t ldb, int64_t ldc) {
  return {s.trans_a,  s.trans_b, s.m,
          s.n,        s.k,       lda,
          ldb,        ldc,       static_cast<int64_t>(s.ab),
          static_cast<int64_t>(s.c), s.accumulate, s.has_bias,
          static_cast<int64_t>(s.bias), s.has_addend};
}

std::shared_ptr<MatmulEntry> build(const MatmulShape& s, int64_t lda, int64_t ldb, int64_t ldc) {
  auto e = std::make_shared<MatmulEntry>();
  e->a = matrix_md(s.m, s.k, s.trans_a, lda, s.ab);
  e->b = matrix_md(s.k, s.n, s.trans_b, ldb, s.ab);
  e->c = matrix_md(s.m, s.n, false, ldc, s.c);
  // Our scratchpad, from the tensor allocator whose cache keeps large blocks
  // mapped (oneDNN's own is malloc'ed and freed around every call).
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops po;
  if (s.accumulate) po.append_sum(1.f);
  if (s.has_addend) {
    e->addend = memory::desc({s.m, s.n}, memory::data_type::f32, Dims{s.n, 1});
    po.append_binary(dnnl::algorithm::binary_add, e->addend);
  }
  attr.set_post_ops(po);
  dnnl::matmul::primitive_desc pd;
  if (s.has_bias) {
    e->bias = memory::desc({1, s.n}, dnnl_type(s.bias), Dims{s.n, 1});
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(e->a, e->b, e->bias, e->c), attr,
                                      *engine());
  } else {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(e->a, e->b, e->c), attr, *engine());
  }
  e->prim = dnnl::matmul(pd);
  e->pad = pd.scratchpad_desc();
  e->impl = pd.impl_info_str();
  return e;
}

// Enough for every product of a model's training step several times over;
// past it (shapes that keep changing) the cache starts again.
constexpr size_t kMaxEntries = 1024;

std::mutex matmul_cache_mu;
std::map<MatmulKey, std::shared_ptr<MatmulEntry>>& matmul_cache() {
  static auto* c = new std::map<MatmulKey, std::shared_ptr<MatmulEntry>>();
  return *c;
}

std::shared_ptr<MatmulEntry> entry(const MatmulShape& s, int64_t lda, int64_t ldb, int64_t ldc) {
  const MatmulKey key = make_key(s, lda, ldb, ldc);
  std::lock_guard<std::mutex> lk(matmul_cache_mu);
  auto& c = matmul_cache();
  if (auto it = c.find(key); it != c.end()) return it->second;
  if (c.size() >= kMaxEntries) c.clear();  // shared_ptrs keep running entries alive
  auto e = build(s, lda, ldb, ldc);
  c.emplace(key, e);
  return e;
}

[[noreturn]] void rethrow(const dnnl::error& err, const MatmulShape& s) {
  QK_THROW(Error, "matmul: oneDNN failed (", err.what(), ", status ", static_cast<int>(err.status),
           ") for M=", s.m, " N=", s.n, " K=", s.k, " ", dtype_name(s.ab), " -> ",
           dtype_name(s.c), "; set QK_GEMM_BF16=f32 to multiply in f32 instead");
}

}  // namespace

bool has_bf16_matmul() {
  static const bool ok = [] {
    const std::string mode = env_gemm_bf16.get();
    QK_CHECK(mode == "auto" || mode == "onednn" || mode == "f32", "QK_GEMM_BF16='", mode,
             "': expected auto, onednn or f32");
    if (mode == "f32" || engine() == nullptr) return false;
    if (mode == "onednn") return true;
    // AVX512-BF16 (and AMX, whose ISA code contains its bits): oneDNN's
    // brgemm bf16 kernels. Without them oneDNN emulates or runs reference
    // code, slower than the f32 GEMM on the same data.
    const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    return (isa & bf16) == bf16;
  }();
  return ok;
}

void matmul(const MatmulShape& s, const void* a, int64_t lda, const void* b, int64_t ldb, void* c,
            int64_t ldc, const void* bias, const float* addend) {
  QK_INTERNAL_ASSERT(engine() != nullptr && s.m > 0 && s.n > 0 && s.k > 0);
  QK_INTERNAL_ASSERT(s.has_bias == (bias != nullptr) && s.has_addend == (addend != nullptr));
  try {
    std::shared_ptr<MatmulEntry> e = entry(s, lda, ldb, ldc);
    const dnnl::engine& eng = *engine();
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, memory(e->a, eng, const_cast<void*>(a))},
        {DNNL_ARG_WEIGHTS, memory(e->b, eng, const_cast<void*>(b))},
        {DNNL_ARG_DST, memory(e->c, eng, c)}};
    if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, memory(e->bias, eng, const_cast<void*>(bias)));
    if (addend != nullptr) {
      const int post_op = s.accumulate ? 1 : 0;  // after the sum, when there is one
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(post_op) | DNNL_ARG_SRC_1,
                   memory(e->addend, eng, const_cast<float*>(addend)));
    }
    Tensor pad;
    if (e->pad.get_size() > 0) {
      pad = empty({static_cast<int64_t>(e->pad.get_size())}, TensorOptions(DType::u8));
      args.emplace(DNNL_ARG_SCRATCHPAD, memory(e->pad, eng, pad.raw_data()));
    }
    // oneDNN's OpenMP team follows qk's thread count, one thread inside a
    // qk parallel region (Note [One thread pool] in gemm.h).
    omp_set_num_threads(in_parallel_region() ? 1 : num_threads());
    const AsyncSignalsBlocked no_signals;  // Note [Signals during JIT GEMM]
    e->prim.execute(stream(), args);
    stream().wait();
  } catch (const dnnl::error& err) {
    rethrow(err, s);
  }
}

std::string matmul_impl(const MatmulShape& s, int64_t lda, int64_t ldb, int64_t ldc) {
  if (engine() == nullptr) return {};
  try {
    return entry(s, lda, ldb, ldc)->impl;
  } catch (const dnnl::error& err) {
    rethrow(err, s);
  }
}

void clear_matmul_cache() {
  std::lock_guard<std::mutex> lk(matmul_cache_mu);
  matmul_cache().clear();
}

}  // namespace qk::cpu::onednn

#else  // no oneDNN

namespace qk::cpu::onednn {

bool has_bf16_matmul() { return false; }

void matmul(const MatmulShape&, const void*, int64_t, const void*, int64_t, void*, int64_t,
            const void*, const float*) {
  QK_THROW(Error, "matmul: this build of qianka has no oneDNN; bf16 products run through f32");
}

std::string matmul_impl(const MatmulShape&, int64_t, int64_t, int64_t) { return {}; }
void clear_matmul_cache() {}

}  // namespace qk::cpu::onednn

#endif
