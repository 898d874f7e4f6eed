// Views, copies and casts (qk/tensor/ops/view.h, the Tensor methods) and the
// factories of qk/tensor/tensor.h: every dtype, empty and strided sources,
// writes into strided destinations, casts between every pair of dtypes.
#include "harness/case_builders.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/ops/memory_format.h"
#include "qk/tensor/ops/view.h"

namespace qk::harness {

namespace {

using V = std::vector<Tensor>;
using Fn1 = std::function<Tensor(const Tensor&)>;

struct ViewOp {
  std::string name;
  std::string what;
  Shape shape;
  Layout layout;
  Fn1 f;
};

void view_cases(std::vector<Case>& out, Values& v) {
  const std::vector<ViewOp> raw = {
      {"ops::as_strided",
       "[5,4] strides [13,2] +3",
       {7, 13},
       Layout::contiguous,
       [](const Tensor& a) {
         return ops::as_strided(a, {5, 4}, {13, 2}, a.storage_offset() + 3);
       }},
      {"ops::view",
       "->[13,-1]",
       {7, 13},
       Layout::contiguous,
       [](const Tensor& a) {
         return ops::view(a, {13, -1});
       }},
      {"ops::view",
       "[0,5]->[5,0]",
       {0, 5},
       Layout::contiguous,
       [](const Tensor& a) {
         return ops::view(a, {5, 0});
       }},
      {"ops::reshape",
       "->[91]",
       {7, 13},
       Layout::transposed,
       [](const Tensor& a) { return ops::reshape(a, {91}); }},
      {"ops::reshape",
       "->[-1,7]",
       {7, 13},
       Layout::contiguous,
       [](const Tensor& a) {
         return ops::reshape(a, {-1, 7});
       }},
      {"ops::permute",
       "{2,0,1}",
       {3, 5, 7},
       Layout::sliced,
       [](const Tensor& a) {
         return ops::permute(a, {2, 0, 1});
       }},
      {"ops::transpose",
       "0,2",
       {3, 5, 7},
       Layout::contiguous,
       [](const Tensor& a) { return ops::transpose(a, 0, 2); }},
      {"ops::expand",
       "->[3,7,13]",
       {7, 1},
       Layout::contiguous,
       [](const Tensor& a) {
         return ops::expand(a, {3, 7, 13});
       }},
      {"ops::slice",
       "dim1 1:12:3",
       {7, 13},
       Layout::transposed,
       [](const Tensor& a) { return ops::slice(a, 1, 1, 12, 3); }},
      {"ops::slice",
       "dim0 -3:",
       {1031},
       Layout::contiguous,
       [](const Tensor& a) { return ops::slice(a, 0, -3, 1031); }},
      {"ops::narrow",
       "dim0 2+4",
       {7, 13},
       Layout::sliced,
       [](const Tensor& a) { return ops::narrow(a, 0, 2, 4); }},
      {"ops::select",
       "dim1 5",
       {7, 13},
       Layout::transposed,
       [](const Tensor& a) { return ops::select(a, 1, 5); }},
      {"ops::unsqueeze",
       "dim-1",
       {7, 13},
       Layout::contiguous,
       [](const Tensor& a) { return ops::unsqueeze(a, -1); }},
      {"ops::squeeze",
       "dim1",
       {7, 1, 13},
       Layout::contiguous,
       [](const Tensor& a) { return ops::squeeze(a, 1); }},
      {"ops::flatten",
       "1..2",
       {3, 5, 7},
       Layout::transposed,
       [](const Tensor& a) { return ops::flatten(a, 1, 2); }},
      {"ops::contiguous",
       "",
       {7, 13},
       Layout::transposed,
       [](const Tensor& a) { return ops::contiguous(a); }},
      {"ops::contiguous",
       "",
       {3, 5, 7},
       Layout::expanded,
       [](const Tensor& a) { return ops::contiguous(a); }},
      {"ops::contiguous",
       "channels_last",
       {2, 5, 3, 4},
       Layout::contiguous,
       [](const Tensor& a) { return ops::contiguous(a, ops::MemoryFormat::channels_last); }},
      {"ops::contiguous",
       "from NHWC",
       {2, 5, 3, 4},
       Layout::channels_last,
       [](const Tensor& a) { return ops::contiguous(a); }},
      {"ops::clone", "", {7, 13}, Layout::sliced, [](const Tensor& a) { return ops::clone(a); }},
      {"ops::clone", "", {2, 5, 3, 4}, Layout::channels_last, [](const Tensor& a) { return ops::clone(a); }},
      {"ops::clone", "", {0, 3}, Layout::contiguous, [](const Tensor& a) { return ops::clone(a); }},
      {"ops::to_device",
       "via the CPU",
       {7, 13},
       Layout::transposed,
       [](const Tensor& a) { return ops::to_device(ops::to_device(a, kCPU), a.device()); }},
  };
  for (DType t : kAll) {
    Gen g = [&v, t](const Shape& s) { return v.data(s, t); };
    for (const ViewOp& op : raw) {
      Case c;
      c.op = op.name;
      c.shape = label({shape_label(op.shape, op.layout), op.what});
      c.dtype = t;
      c.inputs = {laid_out(op.shape, op.layout, g, false)};
      const Fn1 f = op.f;
      c.fn = [f](const V& a) { return V{f(a[0])}; };
      out.push_back(std::move(c));
    }
  }
  // The differentiable methods: gradients flow back through each view.
  const std::vector<ViewOp> methods = {
      {"Tensor::view",
       "->[13,-1]",
       {7, 13},
       Layout::contiguous,
       [](const Tensor& a) {
         return a.view({13, -1});
       }},
      {"Tensor::reshape",
       "->[91]",
       {7, 13},
       Layout::transposed,
       [](const Tensor& a) { return a.reshape({91}); }},
      {"Tensor::flatten",
       "",
       {3, 5, 7},
       Layout::sliced,
       [](const Tensor& a) { return a.flatten(); }},
      {"Tensor::permute",
       "{1,2,0}",
       {3, 5, 7},
       Layout::contiguous,
       [](const Tensor& a) {
         return a.permute({1, 2, 0});
       }},
      {"Tensor::transpose",
       "0,1",
       {3, 5, 7},
       Layout::transposed,
       [](const Tensor& a) { return a.transpose(0, 1); }},
      {"Tensor::t", "", {7, 13}, Layout::sliced, [](const Tensor& a) { return a.t(); }},
      {"Tensor::unsqueeze",
       "dim0",
       {7, 13},
       Layout::contiguous,
       [](const Tensor& a) { return a.unsqueeze(0); }},
      {"Tensor::squeeze",
       "dim0",
       {1, 13},
       Layout::contiguous,
       [](const Tensor& a) { return a.squeeze(0); }},
      {"Tensor::expand",
       "->[2,7,13]",
       {7, 13},
       Layout::transposed,
       [](const Tensor& a) {
         return a.expand({2, 7, 13});
       }},
      {"Tensor::slice",
       "dim1 0:13:2",
       {7, 13},
       Layout::contiguous,
       [](const Tensor& a) { return a.slice(1, 0, 13, 2); }},
      {"Tensor::narrow",
       "dim1 3+5",
       {7, 13},
       Layout::expanded,
       [](const Tensor& a) { return a.narrow(1, 3, 5); }},
      {"Tensor::select",
       "dim0 2",
       {7, 13},
       Layout::transposed,
       [](const Tensor& a) { return a.select(0, 2); }},
      {"Tensor::contiguous",
       "",
       {7, 13},
       Layout::transposed,
       [](const Tensor& a) { return a.contiguous(); }},
      {"Tensor::clone", "", {1031}, Layout::sliced, [](const Tensor& a) { return a.clone(); }},
      {"Tensor::clone", "", {7, 13}, Layout::expanded, [](const Tensor& a) { return a.clone(); }},
      {"Tensor::to",
       "device round trip",
       {7, 13},
       Layout::sliced,
       [](const Tensor& a) { return a.to(kCPU).to(a.device()); }},
  };
  for (DType t : kFloating) {
    Gen g = [&v, t](const Shape& s) { return v.data(s, t); };
    for (const ViewOp& op : methods) {
      Case c;
      c.op = op.name;
      c.shape = label({shape_label(op.shape, op.layout), op.what});
      c.dtype = t;
      c.inputs = {laid_out(op.shape, op.layout, g)};
      const Fn1 f = op.f;
      // A product after the view, so each element's gradient differs.
      c.fn = [f](const V& a) { return V{mul(f(a[0]), 1.5)}; };
      out.push_back(std::move(c));
    }
  }
}

void cast_cases(std::vector<Case>& out, Values& v) {
  for (DType from : kAll) {
    for (DType to : kAll) {
      if (from == to) continue;
      Case c;
      c.op = "ops::cast";
      c.shape = label({"[7,13]T", str_cat("->", dtype_name(to))});
      c.dtype = from;
      // Values every dtype can hold: whole numbers in [0, 9] (f16/bf16 too).
      c.inputs = {laid_out(
          {7, 13}, Layout::transposed,
          [&v, from](const Shape& s) {
            return from == DType::boolean ? v.mask(s) : v.whole(s, from, 0, 9);
          },
          false)};
      c.fn = [to](const V& a) { return V{ops::cast(a[0], to)}; };
      out.push_back(std::move(c));
    }
    if (!is_floating(from)) continue;
    Case c;
    c.op = "Tensor::to";
    c.shape = "[7,13] dtype round trip";
    c.dtype = from;
    c.inputs = {laid_out({7, 13}, Layout::contiguous,
                         [&v, from](const Shape& s) { return v.data(s, from); })};
    const DType other = from == DType::f32 ? DType::f64 : DType::f32;
    c.fn = [other](const V& a) { return V{a[0].to(other).to(a[0].dtype())}; };
    c.gradcheck = from != DType::f64;  // f64 -> f32 -> f64 rounds: not f64's derivative
    out.push_back(std::move(c));
  }
  // Floats to integers truncate; fractions and negatives.
  for (DType from : kFloating) {
    for (DType to : {DType::i32, DType::i64, DType::boolean}) {
      Case c;
      c.op = "ops::cast";
      c.shape = label({"[1031] fractions", str_cat("->", dtype_name(to))});
      c.dtype = from;
      c.inputs = {data(v.uniform({1031}, from, -3, 3), false)};
      c.fn = [to](const V& a) { return V{ops::cast(a[0], to)}; };
      out.push_back(std::move(c));
    }
  }
}

void write_cases(std::vector<Case>& out, Values& v) {
  for (DType t : kAll) {
    Gen g = [&v, t](const Shape& s) { return v.data(s, t); };
    // dst strided, src broadcast and of another dtype.
    const DType src_dt = t == DType::f32 ? DType::i32 : DType::f32;
    Case c;
    c.op = "ops::copy_";
    c.shape = label({"dst[7,13]T", str_cat("src[13] ", dtype_name(src_dt))});
    c.dtype = t;
    c.inputs = {laid_out({7, 13}, Layout::transposed, g, false),
                index(t == DType::f32 ? v.whole({13}, DType::i32, -5, 5)
                                      : v.whole({13}, DType::f32, 0, 1))};
    c.fn = [](const V& a) {
      ops::copy_(a[0], a[1]);
      return V{a[0]};
    };
    out.push_back(c);
    c.op = "Tensor::copy_";
    c.shape = "dst[7,13]slice src[7,13]T";
    c.inputs = {laid_out({7, 13}, Layout::sliced, g, false),
                laid_out({7, 13}, Layout::transposed, g, false)};
    c.fn = [](const V& a) {
      Tensor dst = a[0];
      dst.copy_(a[1]);
      return V{dst};
    };
    out.push_back(c);
    c.op = "ops::fill_";
    c.shape = "dst[7,13]slice";
    c.inputs = {laid_out({7, 13}, Layout::sliced, g, false)};
    c.fn = [](const V& a) {
      ops::fill_(a[0], 1);
      return V{a[0]};
    };
    out.push_back(c);
    c.op = "Tensor::fill_";
    c.shape = "dst[0,13]";
    c.inputs = {laid_out({0, 13}, Layout::contiguous, g, false)};
    c.fn = [](const V& a) {
      Tensor dst = a[0];
      dst.fill_(1);
      return V{dst};
    };
    out.push_back(c);
  }
}

// Factories on the case's device and dtype, read from an anchor input.
void factory_cases(std::vector<Case>& out) {
  for (DType t : kAll) {
    auto opts = [](const Tensor& anchor) {
      return TensorOptions().dtype(anchor.dtype()).device(anchor.device());
    };
    const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> fs = {
        {"zeros",
         [opts](const Tensor& a) {
           return zeros({7, 13}, opts(a));
         }},
        {"ones",
         [opts](const Tensor& a) {
           return ones({3, 0, 5}, opts(a));
         }},
        {"full", [opts](const Tensor& a) { return full({1031}, 1, opts(a)); }},
        {"scalar_tensor", [opts](const Tensor& a) { return scalar_tensor(1, opts(a)); }},
        {"empty",
         [opts](const Tensor& a) {
           return empty({7, 13}, opts(a)).fill_(1);
         }},
    };
    for (const auto& [name, f] : fs) {
      Case c;
      c.op = name;
      c.dtype = t;
      c.inputs = {data(zeros({1}, t), false)};
      const auto fn = f;
      c.fn = [fn](const V& a) { return V{fn(a[0])}; };
      out.push_back(std::move(c));
    }
    if (t == DType::boolean) continue;
    Case c;
    c.op = "arange";
    c.dtype = t;
    c.inputs = {data(zeros({1}, t), false)};
    c.fn = [opts](const V& a) {
      return V{arange(13, opts(a[0])), arange(1, 9, 2, opts(a[0])), arange(0, 0, 1, opts(a[0]))};
    };
    out.push_back(std::move(c));
  }
}

}  // namespace

void add_view_copy_cases(std::vector<Case>& out) {
  Values v(1010);
  view_cases(out, v);
  cast_cases(out, v);
  write_cases(out, v);
  factory_cases(out);
}

}  // namespace qk::harness
