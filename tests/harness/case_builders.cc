#include "harness/case_builders.h"

#include <cmath>

#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/view.h"

namespace qk::harness {

Tensor Values::uniform(const Shape& s, DType t, double lo, double hi) {
  Tensor u = rand(s, DType::f64, gen_);
  Tensor v = ops::binary_scalar(BinaryOp::add, ops::binary_scalar(BinaryOp::mul, u, hi - lo), lo);
  if (!is_floating(t)) {
    std::vector<double> f = v.to_vector<double>();
    for (double& x : f) x = std::floor(x);
    v = from_vector<double>(f, s);
  }
  return ops::cast(v, t);
}

Tensor Values::nonzero(const Shape& s, DType t) {
  Tensor mag = uniform(s, DType::f64, 0.5, 2);
  Tensor sign = ops::binary_scalar(
      BinaryOp::sub, ops::binary_scalar(BinaryOp::mul, ops::cast(mask(s), DType::f64), 2.0), 1.0);
  return ops::cast(ops::mul(mag, sign), t);
}

Tensor Values::whole(const Shape& s, DType t, int64_t lo, int64_t hi) {
  Tensor i = randint(lo, hi + 1, s, DType::i64, gen_);
  return ops::cast(i, t);
}

Tensor Values::index(const Shape& s, int64_t n, DType t) {
  return ops::cast(randint(0, n, s, DType::i64, gen_), t);
}

Tensor Values::mask(const Shape& s, double p) {
  return ops::binary_scalar(BinaryOp::lt, rand(s, DType::f64, gen_), p);
}

Tensor Values::data(const Shape& s, DType t) {
  if (t == DType::boolean) return mask(s);
  if (t == DType::u8) return whole(s, t, 0, 9);
  if (!is_floating(t)) return whole(s, t, -9, 9);
  return uniform(s, t);
}

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous:
      return "";
    case Layout::transposed:
      return "T";
    case Layout::sliced:
      return "slice";
    case Layout::expanded:
      return "expand";
    case Layout::channels_last:
      return "NHWC";
  }
  return "?";
}

std::vector<Layout> layouts_for(const Shape& s) {
  std::vector<Layout> out{Layout::contiguous};
  if (s.size() >= 2) out.push_back(Layout::transposed);
  if (!s.empty()) out.push_back(Layout::sliced);
  if (!s.empty() && s[0] > 1) out.push_back(Layout::expanded);
  return out;
}

Input laid_out(const Shape& s, Layout layout, const Gen& gen, bool grad) {
  Input in;
  in.grad = grad;
  const int64_t n = static_cast<int64_t>(s.size());
  switch (layout) {
    case Layout::contiguous:
      in.value = gen(s);
      break;
    case Layout::transposed: {
      Shape stored = s;
      std::swap(stored[n - 1], stored[n - 2]);
      in.value = gen(stored);
      in.view = {"T", [n](const Tensor& t) { return t.transpose(n - 1, n - 2); }};
      break;
    }
    case Layout::sliced: {
      Shape stored = s;
      stored[n - 1] *= 2;
      in.value = gen(stored);
      const int64_t len = stored[n - 1];
      in.view = {"slice", [n, len](const Tensor& t) { return t.slice(n - 1, 0, len, 2); }};
      break;
    }
    case Layout::expanded: {
      Shape stored = s;
      stored[0] = 1;
      in.value = gen(stored);
      in.view = {"expand", [s](const Tensor& t) { return t.expand(s); }};
      break;
    }
    case Layout::channels_last: {
      QK_CHECK(n == 4, "Layout::channels_last needs a 4-D shape, got ", shape_str(s));
      in.value = gen({s[0], s[2], s[3], s[1]});
      in.view = {"NHWC", [](const Tensor& t) { return t.permute({0, 3, 1, 2}); }};
      break;
    }
  }
  return in;
}

Input data(Tensor v, bool grad) {
  Input in;
  in.value = std::move(v);
  in.grad = grad;
  return in;
}

Input index(Tensor v) {
  Input in;
  in.value = std::move(v);
  in.to_f64 = false;
  return in;
}

Input fixed(Tensor v) {
  Input in = index(std::move(v));
  return in;
}

Input none() { return Input{}; }

std::string shape_label(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(s[i]);
  }
  out += ']';
  return out;
}

std::string shape_label(const Shape& s, Layout l) {
  return str_cat(shape_label(s), layout_name(l));
}

std::string label(std::initializer_list<std::string> parts) {
  std::string out;
  for (const std::string& p : parts) {
    if (p.empty()) continue;
    if (!out.empty()) out += ' ';
    out += p;
  }
  return out;
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  add_elementwise_cases(out);
  add_elementwise_autograd_cases(out);
  add_reduce_cases(out);
  add_index_cases(out);
  add_linalg_cases(out);
  add_conv_pool_cases(out);
  add_nn_cases(out);
  add_norm_cases(out);
  add_llm_cases(out);
  add_view_copy_cases(out);
  add_multi_tensor_cases(out);
  add_random_cases(out);
  return out;
}

}  // namespace qk::harness
