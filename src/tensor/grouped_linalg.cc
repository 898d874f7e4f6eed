// Grouped matrix products: validation and dispatch to the kernels.
#include "qk/tensor/ops/grouped_linalg.h"

#include "cpu/grouped_gemm.h"
#include "qk/tensor/dispatch.h"
#include "qk/tensor/ops/view.h"
#include "op_kernel_tables.h"

namespace qk::ops {

QK_DEFINE_KERNEL(grouped_mm_kernel, GroupedMmFn);
QK_DEFINE_KERNEL(grouped_mm_tn_kernel, GroupedMmTnFn);
QK_REGISTER_KERNEL(grouped_mm_kernel, cpu, cpu::grouped_mm);
QK_REGISTER_KERNEL(grouped_mm_tn_kernel, cpu, cpu::grouped_mm_tn);

namespace {

void check_rows(const char* op, const std::vector<int64_t>& rows, int64_t m) {
  int64_t total = 0;
  for (size_t g = 0; g < rows.size(); ++g) {
    QK_CHECK(rows[g] >= 0, op, ": group ", g, " has a negative row count ", rows[g]);
    total += rows[g];
  }
  QK_CHECK(total == m, op, ": the group row counts add up to ", total, " but the input has ", m,
           " rows; rows[g] must count group g's rows, in order");
}

void check_matrix(const char* op, const char* what, const Tensor& t, const Tensor& like) {
  QK_CHECK(t.defined() && t.dim() == 2, op, ": ", what, " must be a 2-D tensor, got ",
           t.defined() ? shape_str(t.shape()) : "an undefined tensor");
  QK_CHECK_TYPE(is_floating(t.dtype()), op, ": expected floating-point tensors, got ", dtype_name(t.dtype()));
  QK_CHECK_TYPE(t.dtype() == like.dtype(), op, ": dtypes differ: ", what, " is ", dtype_name(t.dtype()),
                ", the input ", dtype_name(like.dtype()), "; convert one with .to(dtype)");
  QK_CHECK_DEVICE(t.device() == like.device(), op, ": ", what, " is on ", t.device().str(), ", the input on ",
                  like.device().str());
}

std::vector<Tensor> contiguous_all(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(contiguous(t));
  return out;
}

}  // namespace

Tensor grouped_mm(const Tensor& a, const std::vector<int64_t>& rows, const std::vector<Tensor>& b, bool trans_b,
                  const std::vector<Tensor>& bias) {
  const char* op = "grouped_mm";
  check_matrix(op, "a", a, a);
  check_rows(op, rows, a.size(0));
  QK_CHECK(b.size() == rows.size(), op, ": ", rows.size(), " row groups but ", b.size(), " matrices b");
  QK_CHECK(!b.empty(), op, ": needs at least one group");
  const Shape want = b[0].defined() ? b[0].shape() : Shape{};
  for (size_t g = 0; g < b.size(); ++g) {
    check_matrix(op, "b[g]", b[g], a);
    QK_CHECK(b[g].shape() == want, op, ": b[", g, "] is ", shape_str(b[g].shape()), ", b[0] ", shape_str(want),
             "; every group's matrix has the same shape");
  }
  const int64_t k = trans_b ? want[1] : want[0], n = trans_b ? want[0] : want[1];
  QK_CHECK(a.size(1) == k, op, ": a ", shape_str(a.shape()), " has ", a.size(1), " columns but b[g] ",
           shape_str(want), (trans_b ? " (transposed)" : ""), " expects ", k);
  QK_CHECK(bias.empty() || bias.size() == b.size(), op, ": ", bias.size(), " biases for ", b.size(), " groups");
  for (size_t g = 0; g < bias.size(); ++g) {
    check_matrix(op, "bias[g]", bias[g].defined() ? unsqueeze(bias[g], 0) : bias[g], a);
    QK_CHECK(bias[g].dim() == 1 && bias[g].size(0) == n, op, ": bias[", g, "] must be [", n, "], got ",
             shape_str(bias[g].shape()));
  }
  return grouped_mm_kernel.get(a.device())(contiguous(a), rows, contiguous_all(b), trans_b, contiguous_all(bias));
}

std::vector<Tensor> grouped_mm_tn(const Tensor& a, const Tensor& b, const std::vector<int64_t>& rows) {
  const char* op = "grouped_mm_tn";
  check_matrix(op, "a", a, a);
  check_matrix(op, "b", b, a);
  QK_CHECK(a.size(0) == b.size(0), op, ": a ", shape_str(a.shape()), " and b ", shape_str(b.shape()),
           " must have the same rows");
  check_rows(op, rows, a.size(0));
  return grouped_mm_tn_kernel.get(a.device())(contiguous(a), contiguous(b), rows);
}

}  // namespace qk::ops
