// Strided copy with dtype conversion, and fill.
#include "cpu/kernels.h"
#include "cpu/loops.h"

#include <cstring>

namespace qk::cpu {

void copy(const Tensor& dst, const Tensor& src) {
  auto L = make_layout<2>(dst.shape(), {dst, src});
  dispatch_all(dst.dtype(), "copy", [&](auto dtag) {
    using D = decltype(dtag);
    dispatch_all(src.dtype(), "copy", [&](auto stag) {
      using S = decltype(stag);
      for_each_row<2>(L, [](char* const* p, const int64_t* st, int64_t n) {
        D* d = reinterpret_cast<D*>(p[0]);
        const S* s = reinterpret_cast<const S*>(p[1]);
        if constexpr (std::is_same_v<D, S>) {
          if (st[0] == 1 && st[1] == 1) {
            std::memcpy(d, s, static_cast<size_t>(n) * sizeof(D));
            return;
          }
        }
        if (st[0] == 1 && st[1] == 1) {
          for (int64_t i = 0; i < n; ++i) d[i] = cast_value<D>(s[i]);
        } else {
          for (int64_t i = 0; i < n; ++i) d[i * st[0]] = cast_value<D>(s[i * st[1]]);
        }
      });
    });
  });
}

void fill(const Tensor& dst, double value) {
  auto L = make_layout<1>(dst.shape(), {dst});
  dispatch_all(dst.dtype(), "fill", [&](auto tag) {
    using T = decltype(tag);
    const T v = cast_value<T>(value);
    for_each_row<1>(L, [v](char* const* p, const int64_t* st, int64_t n) {
      T* d = reinterpret_cast<T*>(p[0]);
      if (st[0] == 1) {
        for (int64_t i = 0; i < n; ++i) d[i] = v;
      } else {
        for (int64_t i = 0; i < n; ++i) d[i * st[0]] = v;
      }
    });
  });
}

}  // namespace qk::cpu
