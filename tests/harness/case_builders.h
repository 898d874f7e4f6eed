// What the case tables (cases_*.cc) are written with: deterministic values,
// inputs laid out contiguously or through a view, and the dtype sets.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "harness/op_harness.h"
#include "qk/base/error.h"
#include "qk/tensor/generator.h"

namespace qk::harness {

inline const std::vector<DType> kFloating = {DType::f32, DType::f64, DType::bf16, DType::f16};
inline const std::vector<DType> kIntegers = {DType::i32, DType::i64, DType::u8};
inline const std::vector<DType> kNumeric = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                            DType::i32, DType::i64, DType::u8};
inline const std::vector<DType> kAll = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                        DType::i32, DType::i64, DType::u8,   DType::boolean};

// Deterministic values: each table draws from its own seeded stream, so a
// case's inputs do not depend on which other cases exist.
class Values {
 public:
  explicit Values(uint64_t seed) : gen_(seed) {}
  // Uniform in [lo, hi), rounded to t (integer dtypes: floored).
  Tensor uniform(const Shape& s, DType t, double lo = -2, double hi = 2);
  Tensor positive(const Shape& s, DType t) { return uniform(s, t, 0.5, 2); }
  // |v| in [0.5, 2), either sign: safe denominators.
  Tensor nonzero(const Shape& s, DType t);
  // Whole numbers in [lo, hi] in dtype t (bool: 0/1): ties and equalities occur.
  Tensor whole(const Shape& s, DType t, int64_t lo, int64_t hi);
  // Indices in [0, n), i64 or i32.
  Tensor index(const Shape& s, int64_t n, DType t = DType::i64);
  // True with probability p.
  Tensor mask(const Shape& s, double p = 0.5);
  // Values for a dtype's "data" input: uniform for floating, small whole
  // numbers for integers, 0/1 for bool.
  Tensor data(const Shape& s, DType t);
  Generator& generator() { return gen_; }

 private:
  Generator gen_;
};

// How an input of logical shape s is laid out in memory.
enum class Layout {
  contiguous,
  transposed,  // stored with the last two dims swapped, viewed through transpose
  sliced,      // every second element along the last dim of a value twice as long
  expanded,    // size 1 along dim 0, broadcast by expand (stride 0)
  channels_last,  // 4-D [N, C, H, W] stored [N, H, W, C] (memory_format.h), viewed through permute
};
const char* layout_name(Layout l);  // "", "T", "slice", "expand", "NHWC"
// The layouts that make sense for s (transposed needs 2 dims, expanded a dim 0 > 1).
std::vector<Layout> layouts_for(const Shape& s);

using Gen = std::function<Tensor(const Shape&)>;
// An input of logical shape s reached through `layout`; gen makes the value.
Input laid_out(const Shape& s, Layout layout, const Gen& gen, bool grad = true);
// Contiguous shorthands.
Input data(Tensor v, bool grad = true);  // grad only takes effect on floating values
Input index(Tensor v);                   // never cast, never differentiated
Input fixed(Tensor v);                   // kept in its dtype for the reference run
Input none();                            // an undefined (optional) argument

using detail::str_cat;

// "[7, 13]" without spaces: "[7,13]".
std::string shape_label(const Shape& s);
// The shape and the layout's name: "[7,13]T".
std::string shape_label(const Shape& s, Layout l);
// Joins non-empty parts with spaces.
std::string label(std::initializer_list<std::string> parts);

// The case tables, one per area.
void add_elementwise_cases(std::vector<Case>& out);
void add_elementwise_autograd_cases(std::vector<Case>& out);
void add_reduce_cases(std::vector<Case>& out);
void add_index_cases(std::vector<Case>& out);
void add_linalg_cases(std::vector<Case>& out);
void add_conv_pool_cases(std::vector<Case>& out);
void add_nn_cases(std::vector<Case>& out);
void add_norm_cases(std::vector<Case>& out);
void add_llm_cases(std::vector<Case>& out);
void add_view_copy_cases(std::vector<Case>& out);
void add_random_cases(std::vector<Case>& out);
void add_multi_tensor_cases(std::vector<Case>& out);

}  // namespace qk::harness
