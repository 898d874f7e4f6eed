// layer_norm and rms_norm on bf16 activations [N, C] at a transformer's
// widths (C = 512..768, and an odd one), forward and backward, against the
// f32 computation of the same bf16-rounded input. The kernels accumulate in
// f32 and round each output once, so outputs and dx are within 2^-8
// relative (+1e-3 absolute for values near 0); weight gradients (sums over
// N rows in f32) are exact to f32 for f32 weights, one bf16 rounding for bf16
// weights.
#include <gtest/gtest.h>

#include "common/fixtures.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/view.h"

namespace qk {
namespace {

using test::all_close;

// Copies (never views or the tensor itself), so leaves and saved results
// are never shared between runs.
Tensor f32(const Tensor& t) { return ops::clone(ops::cast(t, DType::f32)); }
Tensor leaf(const Tensor& t, DType dt) { return ops::clone(ops::cast(t, dt)).requires_grad_(); }

struct Grads {
  Tensor y, dx, dw, db;
};

// y = norm(x) and the gradients of sum(y * probe), with x (and the
// parameters) as fresh leaves in dtype dt / pdt.
Grads run(bool rms, const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& probe,
          DType dt, DType pdt) {
  Tensor x = leaf(x0, dt), w = leaf(w0, pdt), b = leaf(b0, pdt);
  const int64_t C = x0.size(1);
  Tensor y = rms ? rms_norm(x, {C}, w, 1e-5) : layer_norm(x, {C}, w, b, 1e-5);
  sum(mul(y.to(DType::f32), probe)).backward();
  return {f32(y), f32(x.grad()), f32(w.grad()), rms ? Tensor() : f32(b.grad())};
}

class NormBf16 : public ::testing::TestWithParam<bool> {};  // rms?

TEST_P(NormBf16, MatchesF32OfRoundedInputs) {
  const bool rms = GetParam();
  Generator g(41);
  for (int64_t C : {512, 515, 768}) {
    // bf16-exact inputs and probe, so both runs see the same numbers.
    Tensor x0 = f32(ops::cast(add(mul(randn({37, C}, {}, g), 2.0), 0.5), DType::bf16));
    Tensor w0 = f32(ops::cast(add(randn({C}, {}, g), 1.0), DType::bf16));
    Tensor b0 = f32(ops::cast(randn({C}, {}, g), DType::bf16));
    Tensor probe = f32(ops::cast(randn({37, C}, {}, g), DType::bf16));
    Grads ref = run(rms, x0, w0, b0, probe, DType::f32, DType::f32);
    for (DType pdt : {DType::f32, DType::bf16}) {
      Grads low = run(rms, x0, w0, b0, probe, DType::bf16, pdt);
      const double wtol = pdt == DType::f32 ? 1e-5 : 1.0 / 256;
      EXPECT_TRUE(all_close(low.y, ref.y, 1.0 / 256, 1e-3)) << "C=" << C;
      EXPECT_TRUE(all_close(low.dx, ref.dx, 1.0 / 256, 1e-3)) << "C=" << C;
      EXPECT_TRUE(all_close(low.dw, ref.dw, wtol, 1e-3)) << "C=" << C << " " << dtype_name(pdt);
      if (!rms) {
        EXPECT_TRUE(all_close(low.db, ref.db, wtol, 1e-3)) << "C=" << C;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(LayerAndRms, NormBf16, ::testing::Values(false, true));

}  // namespace
}  // namespace qk
