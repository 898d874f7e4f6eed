// Printing tensors the way PyTorch does: nested brackets, aligned columns,
// "..." summaries past 1000 elements, and the dtype/device when not default.
#include <algorithm>
#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "qk/tensor/tensor.h"

namespace qk {

namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  bool floating = true;
  bool sci = false;
  int width = 1;

  std::string fmt_value(double v) const {
    if (!floating) return fmt::format("{}", static_cast<int64_t>(v));
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return sci ? fmt::format("{:.4e}", v) : fmt::format("{:.4f}", v);
  }
};

void print_rec(std::ostringstream& os, const std::vector<double>& vals, const Shape& shape,
               const Shape& strides, int64_t offset, size_t dim, bool summarize,
               const Formatter& f, int indent) {
  int64_t n = shape[dim];
  os << "[";
  auto emit = [&](int64_t i) {
    if (dim + 1 == shape.size()) {
      std::string s = f.fmt_value(vals[offset + i * strides[dim]]);
      os << std::string(std::max<int>(0, f.width - static_cast<int>(s.size())), ' ') << s;
    } else {
      print_rec(os, vals, shape, strides, offset + i * strides[dim], dim + 1, summarize, f, indent + 1);
    }
  };
  std::string sep = dim + 1 == shape.size() ? ", " : ",\n" + std::string(indent + 1, ' ');
  bool cut = summarize && n > 2 * kEdgeItems;
  for (int64_t i = 0; i < n; ++i) {
    if (cut && i == kEdgeItems) {
      os << "..." << sep;
      i = n - kEdgeItems;
    }
    emit(i);
    if (i + 1 < n) os << sep;
  }
  os << "]";
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::vector<double> vals = to_vector<double>();
  Formatter f;
  f.floating = is_floating(dtype());
  double maxabs = 0, minabs = INFINITY;
  for (double v : vals) {
    if (!std::isfinite(v)) continue;
    maxabs = std::max(maxabs, std::fabs(v));
    if (v != 0) minabs = std::min(minabs, std::fabs(v));
  }
  f.sci = f.floating && (maxabs >= 1e8 || (minabs < 1e-4 && maxabs > 0));
  for (double v : vals) f.width = std::max<int>(f.width, static_cast<int>(f.fmt_value(v).size()));
  std::ostringstream os;
  os << "tensor(";
  if (dim() == 0) {
    os << f.fmt_value(vals.empty() ? 0.0 : vals[0]);
  } else {
    print_rec(os, vals, shape(), contiguous_strides(shape()), 0, 0, numel() > kSummarizeAbove, f, 7);
  }
  if (dtype() != DType::f32 && dtype() != DType::i64) os << ", dtype=" << dtype_name(dtype());
  if (!device().is_cpu()) os << ", device=" << device().str();
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace qk
