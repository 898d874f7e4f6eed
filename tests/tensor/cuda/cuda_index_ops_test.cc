// Selection and indexing kernels on a GPU against the CPU: clamp (and its
// backward), where, max/min along a dim, cat, index_select, index_add,
// gather, scatter_add, one_hot and topk, in every dtype they take, odd and
// empty shapes, every dim, broadcasting, NaN, -0 and ties, i32 and i64
// indices. Results must equal the CPU's exactly (the sums of index_add and
// scatter_add too: the same additions in the same order), and an index out
// of range must raise the CPU's IndexError, message and all. Skipped
// without a CUDA device (they run in scripts/device-check.sh on the GPU
// machine).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/device_compare.h"
#include "qk/base/error.h"
#include "qk/tensor/cuda.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/index.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"

namespace qk {
namespace {

const Device kCuda0("cuda:0");

using devtest::max_abs_diff;

class CudaIndexOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  }
};

const DType kFloats[] = {DType::f32, DType::f64, DType::bf16, DType::f16};
const DType kNumeric[] = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8};
const DType kAll[] = {DType::f32, DType::f64, DType::bf16, DType::f16,
                      DType::i32, DType::i64, DType::u8,   DType::boolean};
const DType kIndexTypes[] = {DType::i32, DType::i64};

Tensor dev(const Tensor& t) { return ops::to_device(t, kCuda0); }

// The same shape, dtype and values (NaN where NaN, the sign of zero too);
// the GPU result on the GPU.
void expect_same(const Tensor& cpu, const Tensor& gpu, const std::string& what = "") {
  SCOPED_TRACE(what);
  ASSERT_EQ(shape_str(cpu.shape()), shape_str(gpu.shape()));
  ASSERT_EQ(cpu.dtype(), gpu.dtype());
  EXPECT_TRUE(gpu.device() == kCuda0) << gpu.device().str();
  const Tensor g = ops::to_device(gpu, kCPU);
  if (is_floating(cpu.dtype())) {
    const std::vector<double> x = cpu.to_vector<double>(), y = g.to_vector<double>();
    for (size_t i = 0; i < x.size(); ++i) {
      const bool same = std::isnan(x[i]) ? std::isnan(y[i]) : x[i] == y[i] && std::signbit(x[i]) == std::signbit(y[i]);
      if (!same) {
        ADD_FAILURE() << "element " << i << " of " << shape_str(cpu.shape()) << ": cpu " << x[i] << ", cuda " << y[i];
        return;
      }
    }
  } else {
    const std::vector<int64_t> x = cpu.to_vector<int64_t>(), y = g.to_vector<int64_t>();
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i] != y[i]) {
        ADD_FAILURE() << "element " << i << " of " << shape_str(cpu.shape()) << ": cpu " << x[i] << ", cuda " << y[i];
        return;
      }
  }
}

// Values with many ties: quarters in [-span, span) for floats (exact in
// every float dtype), integers in [-span, span) (u8: [0, 2 span)); floats
// get NaN, -0 and +0 sprinkled in when `specials`.
Tensor tied(const Shape& shape, DType t, int64_t span, bool specials, uint32_t seed = 7) {
  std::mt19937 gen(seed);
  const int64_t n = shape_numel(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = static_cast<int64_t>(gen() % static_cast<uint32_t>(2 * span * (is_floating(t) ? 4 : 1)));
    if (is_floating(t)) v[i] = static_cast<double>(r - 4 * span) / 4.0;
    else v[i] = static_cast<double>(t == DType::u8 ? r : r - span);
    if (specials && is_floating(t)) {
      if (i % 11 == 5) v[i] = std::numeric_limits<double>::quiet_NaN();
      else if (i % 13 == 3) v[i] = -0.0;
      else if (i % 17 == 8) v[i] = 0.0;
    }
  }
  return ops::cast(from_vector<double>(v, shape), t);
}

// Normal values in dtype t (integers: small ones, so that sums stay exact).
Tensor values(const Shape& shape, DType t, uint32_t seed = 11) {
  if (is_floating(t)) {
    Generator g(seed);
    return ops::cast(randn(shape, DType::f64, g), t);
  }
  return tied(shape, t, 50, false, seed);
}

Tensor indices(const Shape& shape, int64_t lo, int64_t hi, DType t, uint32_t seed = 3) {
  Generator g(seed);
  return ops::cast(randint(lo, hi, shape, DType::i64, g), t);
}

// The message of the exception of type E that f throws ("" when none).
template <typename E>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.message();
  }
  return "";
}

// ---- clamp, clamp backward, where --------------------------------------------

TEST_F(CudaIndexOps, ClampMatchesTheCpu) {
  const std::optional<double> none;
  struct Bounds {
    std::optional<double> lo, hi;
  };
  for (DType t : kNumeric) {
    SCOPED_TRACE(dtype_name(t));
    for (const Shape& s : {Shape{7, 13}, Shape{1}, Shape{}, Shape{3, 0, 4}, Shape{2, 3, 5, 7}}) {
      Tensor x = tied(s, t, 6, true);
      for (Bounds b : {Bounds{-1.5, 2.25}, Bounds{0.0, none}, Bounds{none, 3.7}, Bounds{2.0, 2.0}, Bounds{-0.0, 0.0}}) {
        if (t == DType::u8 && b.lo && *b.lo < 0) continue;  // a negative u8 bound is the CPU's undefined cast
        expect_same(ops::clamp(x, b.lo, b.hi), ops::clamp(dev(x), b.lo, b.hi), shape_str(s));
      }
    }
    // A strided input (the loop takes any strides).
    Tensor x = tied({9, 6}, t, 6, true);
    expect_same(ops::clamp(ops::transpose(x, 0, 1), -2.0, 1.5), ops::clamp(ops::transpose(dev(x), 0, 1), -2.0, 1.5));
  }
  EXPECT_EQ(error_of<TypeError>([&] { ops::clamp(ones({3}, DType::boolean), 0.0, 1.0); }),
            error_of<TypeError>([&] { ops::clamp(dev(ones({3}, DType::boolean)), 0.0, 1.0); }));
}

TEST_F(CudaIndexOps, ClampBackwardMatchesTheCpu) {
  for (DType t : kFloats) {
    SCOPED_TRACE(dtype_name(t));
    Tensor x = tied({6, 11}, t, 4, true);  // quarters: some on the bounds exactly
    Tensor g = values({6, 11}, t);
    const std::optional<double> none;
    for (auto [lo, hi] : {std::pair{std::optional<double>(-1.0), std::optional<double>(2.5)},
                          std::pair{std::optional<double>(0.0), none}, std::pair{none, std::optional<double>(1.25)}})
      expect_same(ops::clamp_backward(g, x, lo, hi), ops::clamp_backward(dev(g), dev(x), lo, hi));
    // grad broadcast along the rows
    Tensor row = values({11}, t);
    expect_same(ops::clamp_backward(row, x, -1.0, 1.0), ops::clamp_backward(dev(row), dev(x), -1.0, 1.0));
    Tensor e = empty({0, 3}, t);
    expect_same(ops::clamp_backward(e, e, -1.0, 1.0), ops::clamp_backward(dev(e), dev(e), -1.0, 1.0));
  }
}

TEST_F(CudaIndexOps, WhereMatchesTheCpuWithBroadcasting) {
  Tensor cond = ops::cast(indices({7, 1, 5}, 0, 2, DType::i64), DType::boolean);
  for (DType t : kAll) {
    SCOPED_TRACE(dtype_name(t));
    Tensor a = tied({1, 4, 5}, t, 5, true, 1), b = tied({5}, t, 5, true, 2);
    expect_same(ops::where(cond, a, b), ops::where(dev(cond), dev(a), dev(b)), "broadcast");
    Tensor full_a = tied({7, 4, 5}, t, 5, true, 3);
    Tensor scalar = ops::cast(scalar_tensor(1.0), t);
    expect_same(ops::where(cond, full_a, scalar), ops::where(dev(cond), dev(full_a), dev(scalar)), "scalar");
    Tensor base = tied({5, 4, 7}, t, 5, false, 4);  // read transposed: strided
    expect_same(ops::where(cond, ops::transpose(base, 0, 2), full_a),
                ops::where(dev(cond), ops::transpose(dev(base), 0, 2), dev(full_a)), "strided");
    Tensor e = empty({0, 5}, t);
    expect_same(ops::where(empty({0, 1}, DType::boolean), e, b),
                ops::where(dev(empty({0, 1}, DType::boolean)), dev(e), dev(b)), "empty");
  }
}

// ---- max / min along a dim ---------------------------------------------------

TEST_F(CudaIndexOps, MaxMinDimMatchTheCpuWithTiesAndNaN) {
  struct Case {
    Shape shape;
    int64_t dim;
  };
  // Short rows, long rows (a block each), few long columns (moved last),
  // many columns (a thread each), a 0-d tensor, an empty outer dim.
  const std::vector<Case> cases = {{{5, 7, 9}, 0},   {{5, 7, 9}, 1},   {{5, 7, 9}, 2},   {{5, 7, 9}, -1},
                                   {{3, 2000}, 1},   {{2000, 3}, 0},   {{4, 1500, 5}, 1}, {{64, 40, 65}, 1},
                                   {{}, 0},          {{0, 6}, 1},      {{1, 1}, 0},      {{33}, 0}};
  for (DType t : kNumeric) {
    SCOPED_TRACE(dtype_name(t));
    for (const Case& c : cases) {
      SCOPED_TRACE(shape_str(c.shape) + " dim " + std::to_string(c.dim));
      for (bool specials : {false, true}) {
        Tensor x = tied(c.shape, t, 3, specials);  // few distinct values: ties everywhere
        for (bool keepdim : {false, true}) {
          auto [vc, ic] = ops::max_dim(x, c.dim, keepdim);
          auto [vg, ig] = ops::max_dim(dev(x), c.dim, keepdim);
          expect_same(vc, vg, "max values");
          expect_same(ic, ig, "max indices");
          auto [wc, jc] = ops::min_dim(x, c.dim, keepdim);
          auto [wg, jg] = ops::min_dim(dev(x), c.dim, keepdim);
          expect_same(wc, wg, "min values");
          expect_same(jc, jg, "min indices");
        }
      }
    }
    // A strided input.
    Tensor base = tied({6, 9}, t, 3, true);  // read transposed: strided
    expect_same(ops::argmax(ops::transpose(base, 0, 1), 1), ops::argmax(ops::transpose(dev(base), 0, 1), 1), "strided");
    expect_same(ops::argmin(ops::transpose(base, 0, 1), 0), ops::argmin(ops::transpose(dev(base), 0, 1), 0), "strided");
  }
}

// ---- cat -----------------------------------------------------------------------

TEST_F(CudaIndexOps, CatMatchesTheCpu) {
  for (DType t : kAll) {
    SCOPED_TRACE(dtype_name(t));
    for (int64_t dim : {0, 1, 2, -1}) {
      std::vector<Tensor> parts;
      for (int64_t n : {2, 0, 3, 1}) {
        Shape s = {3, 5, 3};
        s[dim < 0 ? 2 : dim] = n;
        parts.push_back(tied(s, t, 5, false, static_cast<uint32_t>(n + 10)));
      }
      std::vector<Tensor> on_gpu;
      for (const Tensor& p : parts) on_gpu.push_back(dev(p));
      expect_same(ops::cat(parts, dim), ops::cat(on_gpu, dim), "dim " + std::to_string(dim));
    }
    // More inputs than one launch takes, odd sizes (narrow units), one strided.
    std::vector<Tensor> parts, on_gpu;
    for (int i = 0; i < 70; ++i) {
      parts.push_back(tied({2, 1 + i % 3, 3}, t, 5, false, static_cast<uint32_t>(i)));
      on_gpu.push_back(dev(parts.back()));
    }
    Tensor tr = tied({3, 4, 2}, t, 5, false, 99);
    parts.push_back(ops::transpose(tr, 0, 2));
    on_gpu.push_back(ops::transpose(dev(tr), 0, 2));
    expect_same(ops::cat(parts, 1), ops::cat(on_gpu, 1), "70 inputs");
    Tensor e = empty({0, 4}, t);
    expect_same(ops::cat({e, e}, 0), ops::cat({dev(e), dev(e)}, 0), "empty");
  }
}

// ---- index_select, gather, one_hot ---------------------------------------------

TEST_F(CudaIndexOps, IndexSelectMatchesTheCpu) {
  for (DType t : kAll) {
    SCOPED_TRACE(dtype_name(t));
    Tensor a = tied({6, 7, 5}, t, 5, true);
    for (DType it : kIndexTypes)
      for (int64_t dim : {0, 1, 2, -1}) {
        const int64_t n = a.size(dim);
        for (Tensor idx : {indices({11}, 0, n, it), indices({1}, 0, n, it), ops::cast(scalar_tensor(n - 1), it),
                           empty({0}, it)})
          expect_same(ops::index_select(a, dim, idx), ops::index_select(dev(a), dim, dev(idx)),
                      std::string(dtype_name(it)) + " dim " + std::to_string(dim) + " " + shape_str(idx.shape()));
      }
    Tensor s = ops::cast(scalar_tensor(3.0), t);
    Tensor zero = from_vector<int64_t>({0}, {1});
    expect_same(ops::index_select(s, 0, zero), ops::index_select(dev(s), 0, dev(zero)), "0-d input");
  }
  Tensor a = values({4, 7}, DType::f32);
  for (DType it : kIndexTypes)
    for (std::vector<int64_t> bad : {std::vector<int64_t>{0, 9, 2, 8}, std::vector<int64_t>{-1, 3}}) {
      Tensor idx = ops::cast(from_vector<int64_t>(bad, {static_cast<int64_t>(bad.size())}), it);
      const std::string c = error_of<IndexError>([&] { ops::index_select(a, 1, idx); });
      const std::string g = error_of<IndexError>([&] { ops::index_select(dev(a), 1, dev(idx)); });
      EXPECT_FALSE(c.empty());
      EXPECT_EQ(c, g);
    }
  // The indices are checked even when there is nothing to copy.
  Tensor none = empty({0, 7}, DType::f32), idx = from_vector<int64_t>({1, 7}, {2});
  EXPECT_EQ(error_of<IndexError>([&] { ops::index_select(none, 1, idx); }),
            error_of<IndexError>([&] { ops::index_select(dev(none), 1, dev(idx)); }));
  EXPECT_NE(error_of<IndexError>([&] { ops::index_select(dev(none), 1, dev(idx)); })
                .find("index_select: index 7 at position 1 is out of range for a dim of size 7"),
            std::string::npos);
}

TEST_F(CudaIndexOps, GatherMatchesTheCpu) {
  for (DType t : kAll) {
    SCOPED_TRACE(dtype_name(t));
    Tensor a = tied({5, 6, 7}, t, 5, true);
    for (DType it : kIndexTypes)
      for (int64_t dim : {0, 1, 2, -2}) {
        const int64_t d = dim < 0 ? dim + 3 : dim;
        Shape is = {4, 5, 3};
        is[d] = 9;  // longer than a along dim; shorter elsewhere
        Tensor idx = indices(is, 0, a.size(d), it);
        expect_same(ops::gather(a, dim, idx), ops::gather(dev(a), dim, dev(idx)), "dim " + std::to_string(dim));
        Shape whole = a.shape();  // the same shape (merged into one dim each side)
        Tensor idx2 = indices(whole, 0, a.size(d), it, 5);
        expect_same(ops::gather(a, dim, idx2), ops::gather(dev(a), dim, dev(idx2)), "same shape");
      }
    Tensor s = ops::cast(scalar_tensor(2.0), t);
    Tensor zeros3 = from_vector<int64_t>({0, 0, 0}, {3});
    expect_same(ops::gather(s, 0, zeros3), ops::gather(dev(s), 0, dev(zeros3)), "0-d input");
    Tensor v = tied({10}, t, 5, false);
    Tensor idx = indices({25}, 0, 10, DType::i64);
    expect_same(ops::gather(v, 0, idx), ops::gather(dev(v), 0, dev(idx)), "1-d");
  }
  Tensor a = values({3, 4}, DType::f64);
  for (DType it : kIndexTypes) {
    Tensor idx = ops::cast(from_vector<int64_t>({0, 1, 2, 3, 1, 4, -2, 0}, {2, 4}), it);
    const std::string c = error_of<IndexError>([&] { ops::gather(a, 1, idx); });
    EXPECT_NE(c.find("gather: index 4 at position 5 is out of range for a dim of size 4"), std::string::npos) << c;
    EXPECT_EQ(c, error_of<IndexError>([&] { ops::gather(dev(a), 1, dev(idx)); }));
  }
}

TEST_F(CudaIndexOps, OneHotMatchesTheCpu) {
  for (DType it : kIndexTypes) {
    SCOPED_TRACE(dtype_name(it));
    for (const Shape& s : {Shape{7}, Shape{3, 4}, Shape{}, Shape{0}, Shape{2, 0}}) {
      Tensor idx = indices(s, 0, 5, it);
      expect_same(ops::one_hot(idx, 5), ops::one_hot(dev(idx), 5), shape_str(s));
      if (idx.numel() > 0) expect_same(ops::one_hot(idx, -1), ops::one_hot(dev(idx), -1), "inferred");
    }
    Tensor e = empty({0}, it);
    expect_same(ops::one_hot(e, 0), ops::one_hot(dev(e), 0), "no classes");
    for (std::vector<int64_t> bad : {std::vector<int64_t>{1, 4, 5, 6}, std::vector<int64_t>{2, -1}}) {
      Tensor idx = ops::cast(from_vector<int64_t>(bad, {static_cast<int64_t>(bad.size())}), it);
      const std::string c = error_of<IndexError>([&] { ops::one_hot(idx, 5); });
      EXPECT_FALSE(c.empty());
      EXPECT_EQ(c, error_of<IndexError>([&] { ops::one_hot(dev(idx), 5); }));
    }
    Tensor one = ops::cast(from_vector<int64_t>({0}, {1}), it);
    EXPECT_EQ(error_of<IndexError>([&] { ops::one_hot(one, 0); }),
              error_of<IndexError>([&] { ops::one_hot(dev(one), 0); }));
  }
}

// ---- index_add, scatter_add (sums in the CPU's order: bit for bit) ---------------

TEST_F(CudaIndexOps, IndexAddMatchesTheCpuBitForBit) {
  for (DType t : kNumeric) {
    SCOPED_TRACE(dtype_name(t));
    Tensor a = values({5, 6, 4}, t, 1);
    for (DType it : kIndexTypes)
      for (int64_t dim : {0, 1, 2, -1}) {
        const int64_t n = a.size(dim);
        for (int64_t k : {int64_t{40}, int64_t{1}, int64_t{0}}) {
          Tensor idx = indices({k}, 0, n, it);  // 40 of at most 6 targets: many repeats
          Shape ss = a.shape();
          ss[dim < 0 ? dim + 3 : dim] = k;
          Tensor src = values(ss, t, 2);
          expect_same(ops::index_add(a, dim, idx, src), ops::index_add(dev(a), dim, dev(idx), dev(src)),
                      std::string(dtype_name(it)) + " dim " + std::to_string(dim) + " k " + std::to_string(k));
        }
      }
    // One target hit 3000 times: f16/bf16 sums in f32, rounded once.
    Tensor b = values({4, 3}, t, 3);
    Tensor all0 = zeros({3000}, DType::i64), src = values({4, 3000}, t, 4);
    expect_same(ops::index_add(b, 1, all0, src), ops::index_add(dev(b), 1, dev(all0), dev(src)), "one target");
    Tensor s = ops::cast(scalar_tensor(1.5), t), one = from_vector<int64_t>({0}, {1});
    Tensor s2 = ops::cast(scalar_tensor(2.0), t);
    expect_same(ops::index_add(s, 0, one, s2), ops::index_add(dev(s), 0, dev(one), dev(s2)), "0-d");
  }
  Tensor a = values({3, 5}, DType::f32), src = values({3, 4}, DType::f32);
  for (DType it : kIndexTypes) {
    Tensor idx = ops::cast(from_vector<int64_t>({0, 5, 1, -3}, {4}), it);
    const std::string c = error_of<IndexError>([&] { ops::index_add(a, 1, idx, src); });
    EXPECT_NE(c.find("index_add: index 5 at position 1 is out of range for a dim of size 5"), std::string::npos) << c;
    EXPECT_EQ(c, error_of<IndexError>([&] { ops::index_add(dev(a), 1, dev(idx), dev(src)); }));
  }
  // Checked with nothing to add too; a bad index before a bad dtype.
  Tensor none = empty({0, 5}, DType::f32), nsrc = empty({0, 2}, DType::f32), idx = from_vector<int64_t>({1, 6}, {2});
  EXPECT_EQ(error_of<IndexError>([&] { ops::index_add(none, 1, idx, nsrc); }),
            error_of<IndexError>([&] { ops::index_add(dev(none), 1, dev(idx), dev(nsrc)); }));
  Tensor bools = ones({2, 5}, DType::boolean), bsrc = ones({2, 2}, DType::boolean);
  EXPECT_EQ(error_of<IndexError>([&] { ops::index_add(bools, 1, idx, bsrc); }),
            error_of<IndexError>([&] { ops::index_add(dev(bools), 1, dev(idx), dev(bsrc)); }));
  Tensor good = from_vector<int64_t>({1, 4}, {2});
  const std::string type_error = error_of<TypeError>([&] { ops::index_add(bools, 1, good, bsrc); });
  EXPECT_FALSE(type_error.empty());
  EXPECT_EQ(type_error, error_of<TypeError>([&] { ops::index_add(dev(bools), 1, dev(good), dev(bsrc)); }));
}

TEST_F(CudaIndexOps, ScatterAddMatchesTheCpuBitForBit) {
  struct Case {
    Shape a, index, src;
    int64_t dim;
    const char* what;
  };
  const std::vector<Case> cases = {
      // short lines (one thread per line)
      {{5, 6, 7}, {4, 9, 3}, {5, 9, 7}, 1, "dim 1, src larger than the index"},
      {{5, 6, 7}, {8, 5, 6}, {8, 6, 7}, 0, "dim 0"},
      {{5, 6, 7}, {5, 6, 20}, {5, 6, 20}, 2, "dim 2"},
      {{5, 6, 7}, {5, 6, 7}, {5, 6, 7}, -1, "same shapes"},
      // long lines, few of them (sorted by destination)
      {{3, 10}, {2, 500}, {3, 500}, 1, "long rows"},
      {{10, 3}, {700, 2}, {700, 3}, 0, "long columns"},
      {{10}, {1000}, {1000}, 0, "1-d"},
      {{7, 4, 5}, {300, 3, 2}, {300, 4, 5}, 0, "long, strided src"}};
  for (DType t : kNumeric) {
    SCOPED_TRACE(dtype_name(t));
    for (const Case& c : cases) {
      SCOPED_TRACE(c.what);
      const int64_t d = c.dim < 0 ? c.dim + static_cast<int64_t>(c.a.size()) : c.dim;
      Tensor a = values(c.a, t, 1), src = values(c.src, t, 2);
      for (DType it : kIndexTypes) {
        Tensor idx = indices(c.index, 0, c.a[d], it);
        expect_same(ops::scatter_add(a, c.dim, idx, src), ops::scatter_add(dev(a), c.dim, dev(idx), dev(src)),
                    dtype_name(it));
      }
    }
    Tensor a = values({4, 3}, t, 5);
    Tensor e = empty({0, 3}, DType::i64), esrc = values({0, 3}, t);
    expect_same(ops::scatter_add(a, 0, e, esrc), ops::scatter_add(dev(a), 0, dev(e), dev(esrc)), "empty index");
    Tensor s = ops::cast(scalar_tensor(1.5), t), s2 = ops::cast(scalar_tensor(2.0), t);
    Tensor z = from_vector<int64_t>({0}, {1});
    expect_same(ops::scatter_add(s, 0, z, s2), ops::scatter_add(dev(s), 0, dev(z), dev(s2)), "0-d");
  }
  for (DType it : kIndexTypes) {
    // A bad index on each path (short lines; long ones), and before a bad dtype.
    Tensor a = values({3, 4}, DType::f32), src = values({3, 4}, DType::f32);
    Tensor idx = ops::cast(from_vector<int64_t>({0, 1, 2, 2, 1, 4, 0, 7, 2, 2, -1, 0}, {3, 4}), it);
    const std::string c = error_of<IndexError>([&] { ops::scatter_add(a, 0, idx, src); });
    EXPECT_NE(c.find("scatter_add: index 4 at position 5 is out of range for a dim of size 3"), std::string::npos) << c;
    EXPECT_EQ(c, error_of<IndexError>([&] { ops::scatter_add(dev(a), 0, dev(idx), dev(src)); }));
    Tensor v = values({10}, DType::f32), vsrc = values({1000}, DType::f32);
    std::vector<int64_t> w = indices({1000}, 0, 10, DType::i64).to_vector<int64_t>();
    w[700] = 10;
    w[900] = -4;
    Tensor vidx = ops::cast(from_vector<int64_t>(w, {1000}), it);
    const std::string lc = error_of<IndexError>([&] { ops::scatter_add(v, 0, vidx, vsrc); });
    EXPECT_NE(lc.find("index 10 at position 700"), std::string::npos) << lc;
    EXPECT_EQ(lc, error_of<IndexError>([&] { ops::scatter_add(dev(v), 0, dev(vidx), dev(vsrc)); }));
    Tensor bools = ones({3, 4}, DType::boolean);
    EXPECT_EQ(error_of<IndexError>([&] { ops::scatter_add(bools, 0, idx, bools); }),
              error_of<IndexError>([&] { ops::scatter_add(dev(bools), 0, dev(idx), dev(bools)); }));
    Tensor good = indices({3, 4}, 0, 3, it);
    const std::string te = error_of<TypeError>([&] { ops::scatter_add(bools, 0, good, bools); });
    EXPECT_FALSE(te.empty());
    EXPECT_EQ(te, error_of<TypeError>([&] { ops::scatter_add(dev(bools), 0, dev(good), dev(bools)); }));
  }
}

// Repeats run to run (no floating atomics).
TEST_F(CudaIndexOps, IndexAddAndScatterAddRepeat) {
  Tensor a = dev(values({8, 300}, DType::f32)), src = dev(values({8, 5000}, DType::f32, 2));
  Tensor idx = dev(indices({5000}, 0, 300, DType::i64));
  Tensor first = ops::index_add(a, 1, idx, src);
  EXPECT_EQ(max_abs_diff(first, ops::index_add(a, 1, idx, src)), 0);
  Tensor sidx = dev(indices({8, 5000}, 0, 300, DType::i64));
  Tensor s1 = ops::scatter_add(a, 1, sidx, src);
  EXPECT_EQ(max_abs_diff(s1, ops::scatter_add(a, 1, sidx, src)), 0);
}

// ---- topk ----------------------------------------------------------------------

TEST_F(CudaIndexOps, TopkMatchesTheCpuOrderAndTies) {
  struct Case {
    Shape shape;
    int64_t dim;
  };
  // One row; many short rows (segmented sort); a few long rows (two sorts);
  // every dim of a 3-D tensor; an empty row count.
  const std::vector<Case> cases = {{{1, 5000}, 1}, {{37, 33}, 1}, {{3, 6000}, 1}, {{6, 11, 9}, 0},
                                   {{6, 11, 9}, 1}, {{6, 11, 9}, 2}, {{700, 20}, 0}, {{0, 5}, 1}};
  for (DType t : kNumeric) {
    SCOPED_TRACE(dtype_name(t));
    for (const Case& c : cases) {
      SCOPED_TRACE(shape_str(c.shape) + " dim " + std::to_string(c.dim));
      const int64_t n = c.shape[c.dim];
      for (bool specials : {false, true}) {
        Tensor x = tied(c.shape, t, 4, specials);  // 32 distinct floats, 8 integers: ties
        for (int64_t k : {int64_t{1}, int64_t{3}, n, int64_t{0}}) {
          if (k > n) continue;
          for (bool largest : {true, false})
            for (bool sorted : {true, false}) {
              SCOPED_TRACE("k " + std::to_string(k) + (largest ? " largest" : " smallest") +
                           (sorted ? " sorted" : " unsorted"));
              auto [vc, ic] = ops::topk(x, k, c.dim, largest, sorted);
              auto [vg, ig] = ops::topk(dev(x), k, c.dim, largest, sorted);
              expect_same(vc, vg, "values");
              expect_same(ic, ig, "indices");
            }
        }
      }
    }
    Tensor s = ops::cast(scalar_tensor(4.0), t);
    for (int64_t k : {0, 1}) {
      auto [vc, ic] = ops::topk(s, k, 0);
      auto [vg, ig] = ops::topk(dev(s), k, 0);
      expect_same(vc, vg, "0-d values");
      expect_same(ic, ig, "0-d indices");
    }
  }
}

}  // namespace
}  // namespace qk
