// Convolution and pooling (qk/tensor/ops/conv.h, functions.h): stride,
// padding, dilation, groups, odd and strided images, ceil mode; the backward
// kernels through the gradients of the differentiable forms.
#include "harness/case_builders.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/ops/conv.h"

namespace qk::harness {

namespace {

using V = std::vector<Tensor>;

struct Conv {
  Shape x;
  Layout lx;
  Shape w;
  bool bias;
  Conv2dParams p;
  std::string str() const {
    return label({str_cat("x", shape_label(x, lx)), str_cat("w", shape_label(w)),
                  bias ? "bias" : "",
                  str_cat("s", p.stride[0], p.stride[1], " p", p.padding[0], p.padding[1], " d",
                          p.dilation[0], p.dilation[1], " g", p.groups)});
  }
};

const std::vector<Conv> kConvs = {
    {{2, 3, 7, 7}, Layout::contiguous, {4, 3, 3, 3}, true, {}},
    {{2, 3, 7, 7}, Layout::transposed, {4, 3, 3, 3}, false, {.stride = {2, 2}, .padding = {1, 1}}},
    {{1, 4, 9, 9}, Layout::contiguous, {6, 2, 3, 3}, true, {.padding = {1, 1}, .groups = 2}},
    {{1, 2, 13, 13}, Layout::sliced, {3, 2, 3, 3}, true, {.dilation = {2, 2}}},
    {{2, 5, 7, 6}, Layout::contiguous, {3, 5, 1, 1}, true, {}},
    {{1, 3, 13, 11}, Layout::contiguous, {2, 3, 5, 3}, true, {.stride = {2, 1}, .padding = {2, 0}}},
    {{0, 3, 7, 7}, Layout::contiguous, {4, 3, 3, 3}, true, {}},
    {{2, 8, 17, 17}, Layout::contiguous, {16, 8, 3, 3}, true, {.padding = {1, 1}}},
    // Channels last (cuDNN's NHWC path on CUDA).
    {{2, 8, 9, 9}, Layout::channels_last, {16, 8, 3, 3}, true, {.padding = {1, 1}}},
    {{2, 6, 10, 8}, Layout::channels_last, {4, 6, 3, 3}, false, {.stride = {2, 2}, .padding = {1, 1}}},
    {{1, 8, 7, 7}, Layout::channels_last, {8, 4, 3, 3}, true, {.padding = {1, 1}, .groups = 2}},
    {{2, 16, 5, 5}, Layout::channels_last, {8, 16, 1, 1}, true, {}},
};

struct Pool {
  Shape x;
  Layout lx;
  Pool2dParams p;
  std::string str() const {
    return label({str_cat("x", shape_label(x, lx)),
                  str_cat("k", p.kernel[0], p.kernel[1], " s", p.stride[0], p.stride[1], " p",
                          p.padding[0], p.padding[1], " d", p.dilation[0], p.dilation[1]),
                  p.ceil_mode ? "ceil" : "", p.count_include_pad ? "" : "exclude-pad"});
  }
};

const std::vector<Pool> kPools = {
    {{2, 3, 8, 8}, Layout::contiguous, {}},
    {{2, 3, 7, 7}, Layout::transposed, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}},
    {{1, 2, 13, 13}, Layout::sliced, {.kernel = {3, 3}, .stride = {2, 2}, .ceil_mode = true}},
    {{1, 2, 13, 11},
     Layout::contiguous,
     {.kernel = {3, 2}, .stride = {1, 2}, .padding = {1, 0}, .count_include_pad = false}},
    {{2, 3, 7, 7}, Layout::channels_last, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}},
};
const Pool kDilatedPool = {
    {1, 2, 13, 13}, Layout::contiguous, {.kernel = {3, 3}, .stride = {1, 1}, .dilation = {2, 2}}};

}  // namespace

void add_conv_pool_cases(std::vector<Case>& out) {
  Values v(606);
  for (DType t : kFloating) {
    Gen g = [&v, t](const Shape& s) { return v.uniform(s, t, -1, 1); };
    for (const Conv& cv : kConvs) {
      for (bool autograd : {false, true}) {
        Case c;
        c.op = autograd ? "conv2d" : "ops::conv2d";
        if (autograd) c.covers = {"ops::conv2d_backward"};
        c.shape = cv.str();
        c.dtype = t;
        c.inputs = {laid_out(cv.x, cv.lx, g, autograd),
                    laid_out(cv.w, Layout::contiguous, g, autograd),
                    cv.bias ? laid_out({cv.w[0]}, Layout::contiguous, g, autograd) : none()};
        const Conv2dParams p = cv.p;
        c.fn = [p, autograd](const V& a) {
          return V{autograd ? conv2d(a[0], a[1], a[2], p) : ops::conv2d(a[0], a[1], a[2], p)};
        };
        out.push_back(std::move(c));
      }
    }
    // The raw backward with each gradient asked for alone.
    for (int need = 0; need < 3; ++need) {
      const Conv& cv = kConvs[2];
      Case c;
      c.op = "ops::conv2d_backward";
      c.shape = label({cv.str(), need == 0 ? "dx" : need == 1 ? "dw" : "db"});
      c.dtype = t;
      c.inputs = {data(g({1, 6, 9, 9}), false), data(g(cv.x), false), data(g(cv.w), false)};
      const Conv2dParams p = cv.p;
      c.fn = [p, need](const V& a) {
        auto [dx, dw, db] =
            ops::conv2d_backward(a[0], a[1], a[2], p, need == 0, need == 1, need == 2);
        return V{dx, dw, db};
      };
      out.push_back(std::move(c));
    }
    // Inference fusion: relu(conv * scale + shift + residual).
    for (bool relu : {false, true}) {
      Case c;
      c.op = "ops::conv2d_fused";
      c.shape = label({"x[2,3,7,7] w[4,3,3,3] p11 scale shift residual", relu ? "relu" : ""});
      c.dtype = t;
      c.inputs = {data(g({2, 3, 7, 7}), false), data(g({4, 3, 3, 3}), false),
                  data(g({4}), false),          data(g({4}), false),
                  data(g({4}), false),          data(g({2, 4, 7, 7}), false)};
      c.fn = [relu](const V& a) {
        return V{ops::conv2d_fused(a[0], a[1], a[2], {.padding = {1, 1}}, a[3], a[4], a[5], relu)};
      };
      out.push_back(std::move(c));
    }
    std::vector<Pool> pools = kPools;
    pools.push_back(kDilatedPool);
    for (const Pool& pl : pools) {
      for (bool autograd : {false, true}) {
        Case c;
        c.op = autograd ? "max_pool2d" : "ops::max_pool2d";
        if (autograd) c.covers = {"ops::max_pool2d_backward"};
        c.shape = pl.str();
        c.dtype = t;
        c.inputs = {laid_out(pl.x, pl.lx, g, autograd)};
        const Pool2dParams p = pl.p;
        c.fn = [p, autograd](const V& a) {
          if (autograd) return V{max_pool2d(a[0], p)};
          auto [y, idx] = ops::max_pool2d(a[0], p);
          return V{y, idx};
        };
        out.push_back(std::move(c));
      }
    }
    for (const Pool& pl : kPools) {
      for (bool autograd : {false, true}) {
        Case c;
        c.op = autograd ? "avg_pool2d" : "ops::avg_pool2d";
        if (autograd) c.covers = {"ops::avg_pool2d_backward"};
        c.shape = pl.str();
        c.dtype = t;
        c.inputs = {laid_out(pl.x, pl.lx, g, autograd)};
        const Pool2dParams p = pl.p;
        c.fn = [p, autograd](const V& a) {
          return V{autograd ? avg_pool2d(a[0], p) : ops::avg_pool2d(a[0], p)};
        };
        out.push_back(std::move(c));
      }
    }
    const std::vector<std::tuple<Shape, Layout, std::array<int64_t, 2>>> adaptive = {
        {{2, 3, 7, 7}, Layout::contiguous, {3, 3}},
        {{2, 3, 7, 7}, Layout::transposed, {1, 1}},
        {{1, 2, 13, 13}, Layout::sliced, {5, 4}},
        {{1, 2, 5, 5}, Layout::contiguous, {7, 7}},
        {{2, 3, 7, 7}, Layout::channels_last, {2, 2}}};
    for (const auto& [x, lx, size] : adaptive) {
      for (bool autograd : {false, true}) {
        Case c;
        c.op = autograd ? "adaptive_avg_pool2d" : "ops::adaptive_avg_pool2d";
        if (autograd) c.covers = {"ops::adaptive_avg_pool2d_backward"};
        c.shape = label({str_cat("x", shape_label(x, lx)), str_cat("out", size[0], "x", size[1])});
        c.dtype = t;
        c.inputs = {laid_out(x, lx, g, autograd)};
        const auto s = size;
        c.fn = [s, autograd](const V& a) {
          return V{autograd ? adaptive_avg_pool2d(a[0], s) : ops::adaptive_avg_pool2d(a[0], s)};
        };
        out.push_back(std::move(c));
      }
    }
  }
}

}  // namespace qk::harness
