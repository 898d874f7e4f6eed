// qianka's dtype as oneDNN's data type, for the two oneDNN computes in here
// (matmul and convolution: f32 and bf16). Include only where QK_HAVE_DNNL.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "qk/base/error.h"
#include "qk/tensor/dtype.h"

namespace qk::cpu::onednn {

inline dnnl::memory::data_type dnnl_type(DType dt) {
  QK_INTERNAL_ASSERT(dt == DType::bf16 || dt == DType::f32);
  return dt == DType::bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

}  // namespace qk::cpu::onednn
