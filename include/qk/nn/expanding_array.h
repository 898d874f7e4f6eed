// ExpandingArray<D>: D integers given as one value (expanded) or as a list,
// for kernel sizes, strides and paddings, as torch::ExpandingArray.
//
//   Conv2dOptions(3, 16, 3).padding({1, 2});   // kernel 3x3, padding 1 (H) x 2 (W)
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>

#include "qk/base/error.h"

namespace qk::nn {

template <size_t D>
class ExpandingArray {
 public:
  /* implicit */ ExpandingArray(int64_t v) { values_.fill(v); }
  /* implicit */ ExpandingArray(std::initializer_list<int64_t> list) {
    QK_CHECK(list.size() == D || list.size() == 1, "expected ", D, " values (or 1 to repeat), got ",
             list.size());
    if (list.size() == 1) {
      values_.fill(*list.begin());
    } else {
      size_t i = 0;
      for (int64_t v : list) values_[i++] = v;
    }
  }
  /* implicit */ ExpandingArray(const std::array<int64_t, D>& a) : values_(a) {}

  const std::array<int64_t, D>& operator*() const { return values_; }
  operator std::array<int64_t, D>() const { return values_; }
  int64_t operator[](size_t i) const { return values_[i]; }
  bool operator==(const ExpandingArray& o) const { return values_ == o.values_; }

 private:
  std::array<int64_t, D> values_{};
};

template <size_t D>
std::ostream& operator<<(std::ostream& os, const ExpandingArray<D>& a) {
  os << "[";
  for (size_t i = 0; i < D; ++i) os << (i ? ", " : "") << a[i];
  return os << "]";
}

}  // namespace qk::nn
