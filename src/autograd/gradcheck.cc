#include "qk/autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "qk/autograd/autograd.h"
#include "qk/tensor/ops/view.h"

namespace qk::autograd {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, double eps, double atol, double rtol) {
  GradcheckResult r;
  // Analytical gradients.
  for (const auto& t : inputs)
    if (t.defined() && t.requires_grad()) t.set_grad(Tensor());
  Tensor y = f(inputs);
  QK_CHECK(y.numel() == 1, "gradcheck: the function must return a scalar, got shape ",
           shape_str(y.shape()));
  y.backward();
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.defined() || !x.requires_grad()) continue;
    QK_CHECK(x.is_contiguous(), "gradcheck: input ", k, " must be contiguous");
    Tensor analytic = x.grad().defined() ? x.grad().to(DType::f64) : zeros(x.shape(), DType::f64);
    std::vector<double> an = analytic.to_vector<double>();
    // Numerical gradients: perturb each element in place, in the input's dtype.
    for (int64_t i = 0; i < x.numel(); ++i) {
      Tensor flat = ops::view(x.detach(), {-1});
      Tensor elem = ops::slice(flat, 0, i, i + 1);
      double orig = elem.item<double>();
      double num;
      {
        NoGradGuard ng;
        ops::fill_(elem, orig + eps);
        double fp = f(inputs).item<double>();
        ops::fill_(elem, orig - eps);
        double fm = f(inputs).item<double>();
        ops::fill_(elem, orig);
        double h = (orig + eps) - (orig - eps);  // the step actually taken in this dtype
        if (x.dtype() != DType::f64) {
          Tensor probe = full({}, orig + eps, x.dtype());
          Tensor probe_m = full({}, orig - eps, x.dtype());
          h = probe.item<double>() - probe_m.item<double>();
        }
        num = (fp - fm) / h;
      }
      double err = std::fabs(an[i] - num);
      r.max_abs_error = std::max(r.max_abs_error, err);
      if (!(err <= atol + rtol * std::fabs(num)) && r.ok) {
        r.ok = false;
        std::ostringstream os;
        os << "input " << k << " (shape " << shape_str(x.shape()) << "), element " << i
           << ": analytic " << an[i] << " vs numeric " << num << " (abs error " << err << ")";
        r.message = os.str();
      }
    }
  }
  if (r.ok) r.message = "ok";
  return r;
}

}  // namespace qk::autograd
