// Random numbers (qk/tensor/generator.h): from a fixed generator, every
// device must draw the same Philox stream, so the values match the CPU's
// exactly (up to the dtype's rounding); fills into strided destinations.
#include "harness/case_builders.h"
#include "qk/tensor/ops/view.h"

namespace qk::harness {

namespace {

using V = std::vector<Tensor>;
constexpr uint64_t kSeed = 0x5a5a;

TensorOptions like(const Tensor& anchor) {
  return TensorOptions().dtype(anchor.dtype()).device(anchor.device());
}

Case make(std::string op, std::string shape, DType t, std::vector<Input> in, OpFn fn) {
  Case c;
  c.op = std::move(op);
  c.shape = std::move(shape);
  c.dtype = t;
  c.inputs = std::move(in);
  c.fn = std::move(fn);
  return c;
}

}  // namespace

void add_random_cases(std::vector<Case>& out) {
  Values v(1111);
  for (DType t : kFloating) {
    Input anchor = data(zeros({1}, t), false);
    out.push_back(make("rand", "[7,13]", t, {anchor}, [](const V& a) {
      Generator g(kSeed);
      return V{rand({7, 13}, like(a[0]), g), rand({1031}, like(a[0]), g)};
    }));
    out.push_back(make("randn", "[7,13] [0]", t, {anchor}, [](const V& a) {
      Generator g(kSeed);
      return V{randn({7, 13}, like(a[0]), g), randn({0}, like(a[0]), g)};
    }));
    Gen gen = [&v, t](const Shape& s) { return v.data(s, t); };
    for (Layout l : {Layout::contiguous, Layout::transposed, Layout::sliced}) {
      const std::string sh = shape_label({7, 13}, l);
      out.push_back(make("uniform_", sh, t, {laid_out({7, 13}, l, gen, false)}, [](const V& a) {
        Generator g(kSeed);
        uniform_(a[0], -3, 5, g);
        return V{a[0]};
      }));
      out.push_back(make("normal_", sh, t, {laid_out({7, 13}, l, gen, false)}, [](const V& a) {
        Generator g(kSeed);
        normal_(a[0], 0.5, 2, g);
        return V{a[0]};
      }));
    }
  }
  for (DType t : kAll) {
    Input anchor = data(zeros({1}, t), false);
    out.push_back(make(
        "bernoulli_", "[7,13]T p=0.3", t,
        {laid_out(
            {7, 13}, Layout::transposed, [&v, t](const Shape& s) { return v.data(s, t); }, false)},
        [](const V& a) {
          Generator g(kSeed);
          bernoulli_(a[0], 0.3, g);
          return V{a[0]};
        }));
    if (t == DType::boolean) continue;
    out.push_back(make("randint", "[-5,6) [7,13] and [1031]", t, {anchor}, [t](const V& a) {
      Generator g(kSeed);
      const int64_t lo = t == DType::u8 ? 0 : -5;
      return V{randint(lo, 6, {7, 13}, like(a[0]), g), randint(lo, 200, {1031}, like(a[0]), g)};
    }));
  }
  // randperm has no device argument: a CPU function; its case checks that
  // one seed gives one permutation.
  out.push_back(make("randperm", "1031 and 0", DType::i64, {}, [](const V&) {
    Generator g(kSeed);
    return V{randperm(1031, g), randperm(0, g)};
  }));
}

}  // namespace qk::harness
