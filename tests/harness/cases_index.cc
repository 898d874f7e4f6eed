// Joining, splitting and indexing, raw (qk/tensor/ops/index.h) and
// differentiable (qk/autograd/functions.h): every dtype the op moves,
// duplicate and empty indices, i32 and i64 indices, strided inputs.
#include "harness/case_builders.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/index.h"
#include "qk/tensor/ops/view.h"

namespace qk::harness {

namespace {

using V = std::vector<Tensor>;

Case make(std::string op, std::string shape, DType t, std::vector<Input> in, OpFn fn) {
  Case c;
  c.op = std::move(op);
  c.shape = std::move(shape);
  c.dtype = t;
  c.inputs = std::move(in);
  c.fn = std::move(fn);
  return c;
}

// Distinct values (a shuffled 0..n-1, offset), so that top-k has no ties
// whose order a backend may break its own way.
Tensor distinct(Values& v, const Shape& s, DType t) {
  Tensor p = ops::reshape(randperm(shape_numel(s), v.generator()), s);
  if (t != DType::u8)
    p = ops::binary_scalar(BinaryOp::sub, p, static_cast<double>(shape_numel(s) / 2));
  return ops::cast(p, t);
}

void joins(std::vector<Case>& out, Values& v, bool autograd) {
  const std::string cat_name = autograd ? "cat" : "ops::cat";
  const std::string stack_name = autograd ? "stack" : "ops::stack";
  const std::vector<DType> dtypes = autograd ? kFloating : kAll;
  for (DType t : dtypes) {
    Gen g = [&v, t](const Shape& s) { return v.data(s, t); };
    auto cat_fn = [autograd](int64_t dim) {
      return [autograd, dim](const V& a) { return V{autograd ? cat(a, dim) : ops::cat(a, dim)}; };
    };
    auto stack_fn = [autograd](int64_t dim) {
      return
          [autograd, dim](const V& a) { return V{autograd ? stack(a, dim) : ops::stack(a, dim)}; };
    };
    out.push_back(make(cat_name, "dim=0 [3,5]+[2,5]slice+[0,5]", t,
                       {laid_out({3, 5}, Layout::contiguous, g, autograd),
                        laid_out({2, 5}, Layout::sliced, g, autograd),
                        laid_out({0, 5}, Layout::contiguous, g, autograd)},
                       cat_fn(0)));
    out.push_back(make(cat_name, "dim=1 [7,3]T+[7,4]+[7,1031]", t,
                       {laid_out({7, 3}, Layout::transposed, g, autograd),
                        laid_out({7, 4}, Layout::contiguous, g, autograd),
                        laid_out({7, 1031}, Layout::contiguous, g, autograd)},
                       cat_fn(1)));
    out.push_back(make(cat_name, "dim=-1 [2,3,4]expand+[2,3,1]", t,
                       {laid_out({2, 3, 4}, Layout::expanded, g, autograd),
                        laid_out({2, 3, 1}, Layout::contiguous, g, autograd)},
                       cat_fn(-1)));
    for (int64_t dim : {0, 2, -1}) {
      out.push_back(make(stack_name, str_cat("dim=", dim, " 3x[3,5]T"), t,
                         {laid_out({3, 5}, Layout::transposed, g, autograd),
                          laid_out({3, 5}, Layout::contiguous, g, autograd),
                          laid_out({3, 5}, Layout::sliced, g, autograd)},
                         stack_fn(dim)));
    }
    out.push_back(make(stack_name, "dim=0 2x[0,3]", t,
                       {laid_out({0, 3}, Layout::contiguous, g, autograd),
                        laid_out({0, 3}, Layout::contiguous, g, autograd)},
                       stack_fn(0)));
  }
}

void splits(std::vector<Case>& out, Values& v, bool autograd) {
  const std::vector<DType> dtypes = autograd ? kFloating : kAll;
  for (DType t : dtypes) {
    Gen g = [&v, t](const Shape& s) { return v.data(s, t); };
    for (Layout l : {Layout::contiguous, Layout::transposed}) {
      out.push_back(make(autograd ? "split" : "ops::split",
                         label({shape_label({7, 13}, l), "size=3 dim=1"}), t,
                         {laid_out({7, 13}, l, g, autograd)}, [autograd](const V& a) {
                           return autograd ? split(a[0], 3, 1) : ops::split(a[0], 3, 1);
                         }));
      out.push_back(make(autograd ? "chunk" : "ops::chunk",
                         label({shape_label({7, 13}, l), "chunks=3 dim=0"}), t,
                         {laid_out({7, 13}, l, g, autograd)}, [autograd](const V& a) {
                           return autograd ? chunk(a[0], 3, 0) : ops::chunk(a[0], 3, 0);
                         }));
    }
    if (autograd) continue;
    out.push_back(make("ops::split_with_sizes", "[7,13]slice sizes=[2,0,5] dim=0", t,
                       {laid_out({7, 13}, Layout::sliced, g, false)}, [](const V& a) {
                         return ops::split_with_sizes(a[0], {2, 0, 5}, 0);
                       }));
    out.push_back(make("ops::split", "[0,5] size=2 dim=0", t,
                       {laid_out({0, 5}, Layout::contiguous, g, false)},
                       [](const V& a) { return ops::split(a[0], 2, 0); }));
  }
}

void gathers(std::vector<Case>& out, Values& v, bool autograd) {
  const std::vector<DType> moves = autograd ? kFloating : kAll;     // ops that only move values
  const std::vector<DType> adds = autograd ? kFloating : kNumeric;  // ops that add them
  for (DType t : moves) {
    Gen g = [&v, t](const Shape& s) { return v.data(s, t); };
    for (DType it : {DType::i64, DType::i32}) {
      const std::string idx = dtype_name(it);
      out.push_back(make(
          autograd ? "index_select" : "ops::index_select", label({"[7,13]T dim=0 index[5]", idx}),
          t, {laid_out({7, 13}, Layout::transposed, g, autograd), index(v.index({5}, 7, it))},
          [autograd](const V& a) {
            return V{autograd ? index_select(a[0], 0, a[1]) : ops::index_select(a[0], 0, a[1])};
          }));
      out.push_back(
          make(autograd ? "gather" : "ops::gather", label({"[7,13]slice dim=1 index[7,5]", idx}), t,
               {laid_out({7, 13}, Layout::sliced, g, autograd), index(v.index({7, 5}, 13, it))},
               [autograd](const V& a) {
                 return V{autograd ? gather(a[0], 1, a[1]) : ops::gather(a[0], 1, a[1])};
               }));
    }
    out.push_back(
        make(autograd ? "index_select" : "ops::index_select", "[1031] index[13]", t,
             {laid_out({1031}, Layout::contiguous, g, autograd), index(v.index({13}, 1031))},
             [autograd](const V& a) {
               return V{autograd ? index_select(a[0], 0, a[1]) : ops::index_select(a[0], 0, a[1])};
             }));
    out.push_back(
        make(autograd ? "index_select" : "ops::index_select", "[7,13] dim=1 index[0]", t,
             {laid_out({7, 13}, Layout::contiguous, g, autograd), index(v.index({0}, 13))},
             [autograd](const V& a) {
               return V{autograd ? index_select(a[0], 1, a[1]) : ops::index_select(a[0], 1, a[1])};
             }));
    out.push_back(
        make(autograd ? "gather" : "ops::gather", "[7,13] dim=0 index[3,13]", t,
             {laid_out({7, 13}, Layout::contiguous, g, autograd), index(v.index({3, 13}, 7))},
             [autograd](const V& a) {
               return V{autograd ? gather(a[0], 0, a[1]) : ops::gather(a[0], 0, a[1])};
             }));
  }
  for (DType t : adds) {
    Gen g = [&v, t](const Shape& s) { return v.data(s, t); };
    // Duplicate indices: several rows land on one.
    out.push_back(make(
        autograd ? "scatter_add" : "ops::scatter_add", "[7,13] dim=0 index[5,13] src[5,13]T", t,
        {laid_out({7, 13}, Layout::contiguous, g, autograd), index(v.index({5, 13}, 7)),
         laid_out({5, 13}, Layout::transposed, g, autograd)},
        [autograd](const V& a) {
          return V{autograd ? scatter_add(a[0], 0, a[1], a[2])
                            : ops::scatter_add(a[0], 0, a[1], a[2])};
        }));
    out.push_back(make(
        autograd ? "scatter_add" : "ops::scatter_add", "[7,13]T dim=1 index[7,4] src[7,6]", t,
        {laid_out({7, 13}, Layout::transposed, g, autograd), index(v.index({7, 4}, 13, DType::i32)),
         laid_out({7, 6}, Layout::contiguous, g, autograd)},
        [autograd](const V& a) {
          return V{autograd ? scatter_add(a[0], 1, a[1], a[2])
                            : ops::scatter_add(a[0], 1, a[1], a[2])};
        }));
    out.push_back(
        make(autograd ? "scatter_add" : "ops::scatter_add",
             "[129,67] dim=0 index[200,67] src[200,67]", t,
             {laid_out({129, 67}, Layout::contiguous, g, autograd), index(v.index({200, 67}, 129)),
              laid_out({200, 67}, Layout::contiguous, g, autograd)},
             [autograd](const V& a) {
               return V{autograd ? scatter_add(a[0], 0, a[1], a[2])
                                 : ops::scatter_add(a[0], 0, a[1], a[2])};
             }));
    // Thousands of rows into four: sums that must not be rounded at each add
    // (u8 sums wrap around where f64 does not).
    out.push_back(make(
        autograd ? "scatter_add" : "ops::scatter_add", "[4,8] dim=0 index[4096,8] src[4096,8]", t,
        {laid_out({4, 8}, Layout::contiguous, g, autograd), index(v.index({4096, 8}, 4)),
         laid_out({4096, 8}, Layout::contiguous, g, autograd)},
        [autograd](const V& a) {
          return V{autograd ? scatter_add(a[0], 0, a[1], a[2])
                            : ops::scatter_add(a[0], 0, a[1], a[2])};
        }));
    out.back().f64_reference = t != DType::u8;
    if (autograd) {
      // The backward of index_select adds the gradient rows of duplicates.
      out.push_back(make("index_select", "[4,8] dim=0 index[4096]", t,
                         {laid_out({4, 8}, Layout::contiguous, g), index(v.index({4096}, 4))},
                         [](const V& a) { return V{index_select(a[0], 0, a[1])}; }));
      // Whole slices added at repeated indices; the backward selects the gradient's slices.
      out.push_back(make("index_add", "[7,13] dim=0 index[5] src[5,13]slice", t,
                         {laid_out({7, 13}, Layout::contiguous, g, true), index(v.index({5}, 7)),
                          laid_out({5, 13}, Layout::sliced, g, true)},
                         [](const V& a) { return V{index_add(a[0], 0, a[1], a[2])}; }));
      out.push_back(make("index_add", "[7,13]T dim=1 index[3]i32 src[7,3]", t,
                         {laid_out({7, 13}, Layout::transposed, g, true), index(v.index({3}, 13, DType::i32)),
                          laid_out({7, 3}, Layout::contiguous, g, true)},
                         [](const V& a) { return V{index_add(a[0], 1, a[1], a[2])}; }));
      continue;
    }
    out.push_back(make("ops::index_add", "[4,8] dim=0 index[4096] src[4096,8]", t,
                       {laid_out({4, 8}, Layout::contiguous, g, false), index(v.index({4096}, 4)),
                        laid_out({4096, 8}, Layout::contiguous, g, false)},
                       [](const V& a) { return V{ops::index_add(a[0], 0, a[1], a[2])}; }));
    out.back().f64_reference = t != DType::u8;
    out.push_back(
        make("ops::index_add", "[129,67] dim=0 index[300] src[300,67]", t,
             {laid_out({129, 67}, Layout::contiguous, g, false), index(v.index({300}, 129)),
              laid_out({300, 67}, Layout::contiguous, g, false)},
             [](const V& a) { return V{ops::index_add(a[0], 0, a[1], a[2])}; }));
    out.push_back(make("ops::index_add", "[7,13] dim=0 index[5] src[5,13]slice", t,
                       {laid_out({7, 13}, Layout::contiguous, g, false), index(v.index({5}, 7)),
                        laid_out({5, 13}, Layout::sliced, g, false)},
                       [](const V& a) { return V{ops::index_add(a[0], 0, a[1], a[2])}; }));
    out.push_back(
        make("ops::index_add", "[7,13]T dim=1 index[3]i32 src[7,3]", t,
             {laid_out({7, 13}, Layout::transposed, g, false), index(v.index({3}, 13, DType::i32)),
              laid_out({7, 3}, Layout::contiguous, g, false)},
             [](const V& a) { return V{ops::index_add(a[0], 1, a[1], a[2])}; }));
  }
}

void topks(std::vector<Case>& out, Values& v, bool autograd) {
  const std::vector<DType> dtypes = autograd ? kFloating : kNumeric;
  struct TopK {
    Shape shape;
    Layout layout;
    int64_t k, dim;
    bool largest, sorted;
  };
  const std::vector<TopK> ks = {{{7, 13}, Layout::contiguous, 3, -1, true, true},
                                {{7, 13}, Layout::transposed, 2, 0, false, true},
                                {{7, 13}, Layout::sliced, 4, 1, true, false},
                                {{7, 13}, Layout::contiguous, 0, 1, true, true},
                                {{1031}, Layout::contiguous, 5, 0, true, true}};
  for (DType t : dtypes) {
    for (const TopK& k : ks) {
      // bf16 and u8 cannot hold 1031 distinct values.
      if (k.shape[0] == 1031 && (t == DType::bf16 || t == DType::u8)) continue;
      Case c = make(
          autograd ? "topk" : "ops::topk",
          label({shape_label(k.shape, k.layout), str_cat("k=", k.k, " dim=", k.dim),
                 k.largest ? "largest" : "smallest", k.sorted ? "" : "unsorted"}),
          t,
          {laid_out(
              k.shape, k.layout, [&v, t](const Shape& s) { return distinct(v, s, t); }, autograd)},
          [k, autograd](const V& a) {
            auto [vals, idx] = autograd ? topk(a[0], k.k, k.dim, k.largest, k.sorted)
                                        : ops::topk(a[0], k.k, k.dim, k.largest, k.sorted);
            if (!k.sorted) {
              // Unsorted order is the backend's own: compare in sorted order.
              Tensor order = ops::topk(vals.detach(), k.k, k.dim, k.largest, true).second;
              return V{autograd ? gather(vals, k.dim, order) : ops::gather(vals, k.dim, order),
                       ops::gather(idx, k.dim, order)};
            }
            return V{vals, idx};
          });
      out.push_back(std::move(c));
    }
  }
}

}  // namespace

void add_index_cases(std::vector<Case>& out) {
  Values v(404);
  for (bool autograd : {false, true}) {
    joins(out, v, autograd);
    splits(out, v, autograd);
    gathers(out, v, autograd);
    topks(out, v, autograd);
  }
  for (DType it : {DType::i64, DType::i32}) {
    const std::string idx = dtype_name(it);
    out.push_back(make("ops::one_hot", label({"[7] classes=13", idx}), it,
                       {index(v.index({7}, 13, it))},
                       [](const V& a) { return V{ops::one_hot(a[0], 13)}; }));
    out.push_back(make("ops::one_hot", label({"[2,3] classes=inferred", idx}), it,
                       {index(v.index({2, 3}, 5, it))},
                       [](const V& a) { return V{ops::one_hot(a[0], -1)}; }));
    out.push_back(make("ops::one_hot", label({"[0] classes=5", idx}), it,
                       {index(v.index({0}, 5, it))},
                       [](const V& a) { return V{ops::one_hot(a[0], 5)}; }));
  }
}

}  // namespace qk::harness
