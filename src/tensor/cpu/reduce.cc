// Reductions over any set of dims.
//
// The input is made contiguous; reduced dims are merged where adjacent; each
// output element walks its reduced sub-space with the innermost reduced run
// as a (usually unit-stride) vector loop. Accumulation is in f64 (i64 for
// integers), with 8 independent partial sums so the loop vectorises. The split of work never depends on the thread
// count, so results are bit-identical whatever QK_NUM_THREADS is.
#include <cmath>
#include <limits>

#include "qk/base/thread_pool.h"
#include "qk/tensor/ops/view.h"
#include "cpu/kernels.h"

namespace qk::cpu {

namespace {

struct ReduceGeometry {
  Shape kept_sizes, kept_strides;  // of the input, over output elements
  Shape red_sizes, red_strides;    // outer reduced dims (odometer)
  int64_t inner_size = 1, inner_stride = 1;  // innermost reduced run
  int64_t num_out = 1, num_red = 1;
};

ReduceGeometry make_geometry(const Tensor& a, const Shape& dims) {
  ReduceGeometry g;
  const Shape& sz = a.shape();
  const Shape& st = a.strides();
  std::vector<bool> red(sz.size(), false);
  for (int64_t d : dims) red[d] = true;
  Shape rs, rst;
  for (size_t d = 0; d < sz.size(); ++d) {
    if (red[d]) {
      g.num_red *= sz[d];
      if (sz[d] == 1) continue;
      if (!rs.empty() && rst.back() == st[d] * sz[d]) {  // merge with previous reduced dim
        rs.back() *= sz[d];
        rst.back() = st[d];
      } else {
        rs.push_back(sz[d]);
        rst.push_back(st[d]);
      }
    } else {
      g.num_out *= sz[d];
      g.kept_sizes.push_back(sz[d]);
      g.kept_strides.push_back(st[d]);
    }
  }
  if (!rs.empty()) {
    g.inner_size = rs.back();
    g.inner_stride = rst.back();
    rs.pop_back();
    rst.pop_back();
  }
  g.red_sizes = rs;
  g.red_strides = rst;
  return g;
}

int64_t kept_offset(const ReduceGeometry& g, int64_t o) {
  int64_t off = 0;
  for (int64_t d = static_cast<int64_t>(g.kept_sizes.size()) - 1; d >= 0; --d) {
    off += (o % g.kept_sizes[d]) * g.kept_strides[d];
    o /= g.kept_sizes[d];
  }
  return off;
}

template <typename T, typename Acc, typename Combine>
Acc reduce_run(const T* p, int64_t n, int64_t stride, Acc init, Combine comb) {
  if (stride == 1) {
    Acc acc[8];
    for (auto& x : acc) x = init;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int k = 0; k < 8; ++k) acc[k] = comb(acc[k], cast_value<Acc>(p[i + k]));
    for (; i < n; ++i) acc[0] = comb(acc[0], cast_value<Acc>(p[i]));
    Acc r = init;
    for (auto& x : acc) r = comb(r, x);
    return r;
  }
  Acc r = init;
  for (int64_t i = 0; i < n; ++i) r = comb(r, cast_value<Acc>(p[i * stride]));
  return r;
}

// Reduces the sub-space of one output element starting at `base`.
template <typename T, typename Acc, typename Combine>
Acc reduce_one(const ReduceGeometry& g, const T* base, Acc init, Combine comb) {
  int64_t outer = 1;
  for (int64_t s : g.red_sizes) outer *= s;
  Acc acc = init;
  for (int64_t r = 0; r < outer; ++r) {
    int64_t off = 0, rr = r;
    for (int64_t d = static_cast<int64_t>(g.red_sizes.size()) - 1; d >= 0; --d) {
      off += (rr % g.red_sizes[d]) * g.red_strides[d];
      rr /= g.red_sizes[d];
    }
    acc = comb(acc, reduce_run<T, Acc>(base + off, g.inner_size, g.inner_stride, init, comb));
  }
  return acc;
}

template <typename T, typename Acc, typename Combine, typename Finish>
void reduce_impl(const Tensor& out, const Tensor& a, const Shape& dims, Acc init, Combine comb,
                 Finish finish) {
  Tensor ac = ops::contiguous(a);
  ReduceGeometry g = make_geometry(ac, dims);
  const T* src = ac.data_ptr<T>();
  T* dst = out.data_ptr<T>();  // out is contiguous, keepdim layout
  if (g.num_out == 1 && g.red_sizes.empty() && g.inner_stride == 1 && g.inner_size > 65536) {
    // A full reduction of a long run: fixed-size chunks in parallel, then in
    // order (fixed, so the result does not depend on the thread count; the
    // size is not measured).
    constexpr int64_t kChunk = 32768;
    int64_t nchunks = (g.inner_size + kChunk - 1) / kChunk;
    std::vector<Acc> partial(static_cast<size_t>(nchunks), init);
    parallel_for(0, nchunks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        int64_t b = c * kChunk, n = std::min(kChunk, g.inner_size - b);
        partial[c] = reduce_run<T, Acc>(src + b, n, 1, init, comb);
      }
    });
    Acc r = init;
    for (auto& p : partial) r = comb(r, p);
    dst[0] = cast_value<T>(finish(r));
    return;
  }
  // Leading dims reduced, the kept ones innermost ([rows, cols]: a bias
  // gradient over the tokens, a channels-last batch norm's sums): whole rows
  // added into cols accumulators, in chunks of rows in parallel and then the
  // chunks in order (fixed chunks: the result does not depend on the thread
  // count), instead of one strided walk down the rows per output.
  bool leading = !dims.empty() && static_cast<int64_t>(dims.size()) < ac.dim();
  for (size_t i = 0; leading && i < dims.size(); ++i) leading = dims[i] == static_cast<int64_t>(i);
  const int64_t cols = g.num_out, rows = g.num_red;
  if (leading && cols > 1 && cols <= 65536 && rows > 1) {
    const int64_t chunk_rows = std::max<int64_t>(1, 32768 / cols);  // not measured
    const int64_t nchunks = (rows + chunk_rows - 1) / chunk_rows;
    std::vector<Acc> partial(static_cast<size_t>(nchunks * cols), init);
    parallel_for(0, nchunks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        Acc* acc = partial.data() + c * cols;
        const int64_t r1 = std::min(rows, (c + 1) * chunk_rows);
        for (int64_t r = c * chunk_rows; r < r1; ++r) {
          const T* row = src + r * cols;
          for (int64_t j = 0; j < cols; ++j) acc[j] = comb(acc[j], cast_value<Acc>(row[j]));
        }
      }
    });
    parallel_for(0, cols, 1024, [&](int64_t lo, int64_t hi) {
      for (int64_t j = lo; j < hi; ++j) {
        Acc r = init;
        for (int64_t c = 0; c < nchunks; ++c) r = comb(r, partial[static_cast<size_t>(c * cols + j)]);
        dst[j] = cast_value<T>(finish(r));
      }
    });
    return;
  }
  // Grain: not measured (docs/tensor.md, "Threads").
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(g.num_red, 1));
  parallel_for(0, g.num_out, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o)
      dst[o] = cast_value<T>(finish(reduce_one<T, Acc>(g, src + kept_offset(g, o), init, comb)));
  });
}

}  // namespace

void reduce(ReduceOp op, const Tensor& out, const Tensor& a, const Shape& dims) {
  dispatch_numeric(a.dtype(), "reduce", [&](auto tag) {
    using T = decltype(tag);
    // f64 accumulation for every floating type: long f32 sums stay exact to
    // ~1e-9 relative, and the reductions are memory-bound anyway.
    using Acc = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
    ReduceGeometry g = make_geometry(a, dims);  // for the count only
    const double count = static_cast<double>(g.num_red);
    auto ident = [](Acc v) { return v; };
    switch (op) {
      case ReduceOp::sum:
        reduce_impl<T, Acc>(out, a, dims, Acc(0), [](Acc x, Acc y) { return x + y; }, ident);
        break;
      case ReduceOp::mean:
        reduce_impl<T, Acc>(out, a, dims, Acc(0), [](Acc x, Acc y) { return x + y; },
                            [count](Acc v) { return static_cast<Acc>(static_cast<double>(v) / count); });
        break;
      case ReduceOp::amax:
        reduce_impl<T, Acc>(out, a, dims, std::numeric_limits<Acc>::lowest(),
                            [](Acc x, Acc y) { return (y > x || y != y) ? y : x; }, ident);
        break;
      case ReduceOp::amin:
        reduce_impl<T, Acc>(out, a, dims, std::numeric_limits<Acc>::max(),
                            [](Acc x, Acc y) { return (y < x || y != y) ? y : x; }, ident);
        break;
    }
  });
}

void max_min_dim(bool is_max, const Tensor& values, const Tensor& indices, const Tensor& a,
                 int64_t dim) {
  // Move `dim` last (others keep their order) so each output scans one contiguous row.
  Shape perm;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (d != dim) perm.push_back(d);
  perm.push_back(dim);
  Tensor ac = ops::contiguous(ops::permute(a, perm));
  const int64_t n = ac.size(-1);
  const int64_t rows = ac.numel() / std::max<int64_t>(n, 1);
  dispatch_numeric(a.dtype(), is_max ? "max" : "min", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* src = ac.data_ptr<T>();
    T* vals = values.data_ptr<T>();
    int64_t* idx = indices.data_ptr<int64_t>();
    // Grain: not measured (docs/tensor.md, "Threads").
    parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const T* row = src + r * n;
        C best = cast_value<C>(row[0]);
        int64_t bi = 0;
        for (int64_t i = 1; i < n; ++i) {
          C v = cast_value<C>(row[i]);
          if (best != best) break;  // NaN wins, first occurrence
          if (v != v || (is_max ? v > best : v < best)) {
            best = v;
            bi = i;
          }
        }
        vals[r] = cast_value<T>(best);
        idx[r] = bi;
      }
    });
  });
}

}  // namespace qk::cpu
