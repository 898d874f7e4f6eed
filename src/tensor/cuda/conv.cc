// 2-D convolutions on CUDA through cuDNN's convolution API: forward, and the
// backward for data and filter; the bias is added by cuDNN and its gradient
// is a sum over batch and space (the reduce kernel). f32 (TF32 only after
// qk::cuda::set_matmul_allow_tf32(true)), f64, and f16/bf16 with f32
// accumulation. Channels-last inputs (memory_format.h) are described to
// cuDNN as NHWC, with the filter converted to KRSC for the call (cuDNN's
// NHWC kernels want both; the parameter keeps its layout), and give
// channels-last outputs: PyTorch's channels_last path. Algorithms come from cuDNN's heuristics, the first whose
// workspace is at most kMaxWorkspace, chosen once per shape and direction
// (plan_cache.h) with the descriptors.
//
// cuDNN 9 marks this API deprecated in favour of its graph API; it is still
// shipped and is what PyTorch's cuDNN v7 path calls, hence the pragma. (The
// graph API, through cudnn-frontend, runs the fused attention:
// attention_cudnn.cc.)
#include <cudnn.h>

#include <memory>
#include <optional>
#include <vector>

#include "cuda_check.h"
#include "cudnn_handle.h"
#include "graph.h"
#include "plan_cache.h"
#include "qk/base/error.h"
#include "qk/tensor/cuda.h"
#include "qk/tensor/kernel_tables.h"
#include "qk/tensor/ops/memory_format.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"
#include "stream_handle.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace qk::cuda {

namespace {

constexpr size_t kMaxWorkspace = size_t(1) << 30;

cudnnDataType_t data_type(DType t) {
  switch (t) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: break;
  }
  QK_THROW(TypeError, "conv2d on CUDA: ", dtype_name(t), " is not supported (f32, f64, f16, bf16)");
}

// NCHW dims, stored NCHW or (nhwc) NHWC.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(DType t, int64_t n, int64_t c, int64_t h, int64_t w, bool nhwc) {
    QK_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
    QK_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, data_type(t), int(n),
                                              int(c), int(h), int(w)));
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
};
struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc(const Tensor& w, bool nhwc) {
    QK_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d));
    QK_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d, data_type(w.dtype()), nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                              int(w.size(0)), int(w.size(1)), int(w.size(2)), int(w.size(3))));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
};
struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc(const Conv2dParams& p, DType t) {
    QK_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
    // Accumulation: f64 for f64, f32 otherwise.
    QK_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d, int(p.padding[0]), int(p.padding[1]), int(p.stride[0]),
                                                   int(p.stride[1]), int(p.dilation[0]), int(p.dilation[1]),
                                                   CUDNN_CROSS_CORRELATION,
                                                   t == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
    QK_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d, int(p.groups)));
    // f32: FMA only unless TF32 is allowed (cuDNN's default math would use it).
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    if (t == DType::f32 && !matmul_allow_tf32()) math = CUDNN_FMA_MATH;
    if (t == DType::f16 || t == DType::bf16) math = CUDNN_TENSOR_OP_MATH;
    QK_CUDNN_CHECK(cudnnSetConvolutionMathType(d, math));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
};

// A convolution shape's descriptors and the algorithm cuDNN's heuristics
// give it, built once per shape and direction (plan_cache.h), as PyTorch
// keeps cuDNN's algorithm per convolution: a heuristic query costs more
// host time than a small convolution.
struct ConvPlan {
  TensorDesc xd;
  FilterDesc wd;
  ConvDesc cd;
  std::optional<TensorDesc> yd;
  int64_t out[4] = {0, 0, 0, 0};  // the output's n, c, h, w (forward)
  int algo = 0;
  size_t memory = 0;
  bool nhwc;  // x, y and the filter as NHWC/KRSC (x channels last)
  ConvPlan(const Tensor& x, const Tensor& w, const Conv2dParams& p, bool nhwc)
      : xd(x.dtype(), x.size(0), x.size(1), x.size(2), x.size(3), nhwc), wd(w, nhwc), cd(p, x.dtype()),
        nhwc(nhwc) {}
};

enum class ConvDirection : int64_t { forward, backward_data, backward_filter };

PlanCache<ConvPlan>& conv_plans(ConvDirection d) {
  static PlanCache<ConvPlan> fwd("cudnn_conv2d_forward"), data("cudnn_conv2d_backward_data"),
      filter("cudnn_conv2d_backward_filter");
  return d == ConvDirection::forward ? fwd : d == ConvDirection::backward_data ? data : filter;
}

// What the descriptors and the algorithm depend on.
PlanKey conv_key(int device, const Tensor& x, const Tensor& w, const Conv2dParams& p, bool nhwc) {
  return {device,        static_cast<int64_t>(x.dtype()), x.size(0),     x.size(1),     x.size(2),
          x.size(3),     w.size(0),     w.size(1),     w.size(2),     w.size(3),
          p.stride[0],   p.stride[1],   p.padding[0],  p.padding[1],  p.dilation[0],
          p.dilation[1], p.groups,      matmul_allow_tf32(), cudnn_benchmark(), nhwc};
}

// The memory format of a call: channels last when x is (conv.cc's front
// passes grad_out in x's format).
ops::MemoryFormat format_of(const Tensor& x) { return ops::suggest_memory_format(x); }

Tensor workspace(const Tensor& like, size_t bytes) {
  return empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, TensorOptions().dtype(DType::u8).device(like.device()));
}

// The first algorithm (cuDNN's heuristic order, or fastest first when
// timed) that ran and fits the workspace limit.
template <typename Perf>
Perf pick(const Perf* perf, int n, const char* what) {
  for (int i = 0; i < n; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kMaxWorkspace) return perf[i];
  QK_THROW(DeviceError, "conv2d on CUDA: cuDNN offers no ", what, " algorithm within ", kMaxWorkspace >> 20,
           " MiB of workspace");
}

// Benchmark mode (qk::cuda::cudnn_benchmark(), torch.backends.cudnn.benchmark):
// cuDNN times the candidates on scratch buffers of the call's sizes (it
// runs each one: the device waits, once per shape) and lists them fastest
// first. Not during a graph capture, where nothing runs: heuristics then.
bool timing_algorithms(int device) { return cudnn_benchmark() && !capturing(device); }

// A scratch output and the workspace limit's bytes for cudnnFind*.
struct FindScratch {
  Tensor out, ws;
  FindScratch(const Tensor& like, const Shape& out_shape)
      : out(empty(out_shape, TensorOptions().dtype(like.dtype()).device(like.device()))),
        ws(workspace(like, kMaxWorkspace)) {}
};

// alpha and beta in the scaling type cuDNN expects: double for f64, else float.
struct Scale {
  double d1 = 1, d0 = 0;
  float f1 = 1, f0 = 0;
  bool f64;
  explicit Scale(DType t) : f64(t == DType::f64) {}
  const void* one() const { return f64 ? static_cast<const void*>(&d1) : &f1; }
  const void* zero() const { return f64 ? static_cast<const void*>(&d0) : &f0; }
};

Tensor conv2d_on_device(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  const int device = x.device().index;
  DeviceStream ds(device);
  cudnnHandle_t h = cudnn_handle(device);
  QK_CUDNN_CHECK(cudnnSetStream(h, ds.stream()));
  const DType t = x.dtype();
  const ops::MemoryFormat fmt = format_of(x);
  const bool nhwc = fmt == ops::MemoryFormat::channels_last;
  const Tensor wk = nhwc ? ops::contiguous(w, fmt) : w;  // KRSC for NHWC
  if (x.numel() == 0) {  // cuDNN refuses empty descriptors: the output shape by the usual rule
    auto out = [&](int i) {
      return (x.size(2 + i) + 2 * p.padding[i] - p.dilation[i] * (w.size(2 + i) - 1) - 1) / p.stride[i] + 1;
    };
    return ops::empty({x.size(0), w.size(0), out(0), out(1)}, TensorOptions().dtype(t).device(x.device()), fmt);
  }
  const ConvPlan& plan = conv_plans(ConvDirection::forward).get(conv_key(device, x, w, p, nhwc), [&] {
    auto pl = std::make_unique<ConvPlan>(x, w, p, nhwc);
    int n = 0, c = 0, oh = 0, ow = 0;
    QK_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(pl->cd.d, pl->xd.d, pl->wd.d, &n, &c, &oh, &ow));
    pl->out[0] = n, pl->out[1] = c, pl->out[2] = oh, pl->out[3] = ow;
    if (int64_t(n) * c * oh * ow == 0) return pl;
    pl->yd.emplace(t, n, c, oh, ow, nhwc);
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    if (timing_algorithms(device)) {
      FindScratch f(x, {n, c, oh, ow});
      QK_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
          h, pl->xd.d, x.raw_data(), pl->wd.d, wk.raw_data(), pl->cd.d, pl->yd->d, f.out.raw_data(),
          CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf, f.ws.raw_data(), kMaxWorkspace));
    } else {
      QK_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, pl->xd.d, pl->wd.d, pl->cd.d, pl->yd->d,
                                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf));
    }
    const auto algo = pick(perf, found, "forward");
    pl->algo = algo.algo, pl->memory = algo.memory;
    return pl;
  });
  const int64_t c = plan.out[1];
  Tensor y = ops::empty({plan.out[0], c, plan.out[2], plan.out[3]}, TensorOptions().dtype(t).device(x.device()), fmt);
  if (y.numel() == 0) return y;
  Tensor ws = workspace(x, plan.memory);
  Scale s(t);
  QK_CUDNN_CHECK(cudnnConvolutionForward(h, s.one(), plan.xd.d, x.raw_data(), plan.wd.d, wk.raw_data(), plan.cd.d,
                                         static_cast<cudnnConvolutionFwdAlgo_t>(plan.algo), ws.raw_data(),
                                         plan.memory, s.zero(), plan.yd->d, y.raw_data()));
  if (b.defined()) {
    TensorDesc bd(t, 1, c, 1, 1, nhwc);
    QK_CUDNN_CHECK(cudnnAddTensor(h, s.one(), bd.d, b.raw_data(), s.one(), plan.yd->d, y.raw_data()));
  }
  return y;
}

std::tuple<Tensor, Tensor, Tensor> conv2d_backward_on_device(const Tensor& gy, const Tensor& x, const Tensor& w,
                                                             const Conv2dParams& p, bool need_dx, bool need_dw,
                                                             bool need_db) {
  const int device = x.device().index;
  DeviceStream ds(device);
  cudnnHandle_t h = cudnn_handle(device);
  QK_CUDNN_CHECK(cudnnSetStream(h, ds.stream()));
  const DType t = x.dtype();
  TensorOptions opts = TensorOptions().dtype(t).device(x.device());
  const ops::MemoryFormat fmt = format_of(x);
  const bool nhwc = fmt == ops::MemoryFormat::channels_last;
  Tensor dx, dw, db;
  if (need_db) db = ops::sum(gy, {0, 2, 3}, false);
  if (!need_dx && !need_dw) return {dx, dw, db};
  if (gy.numel() == 0 || x.numel() == 0) {
    if (need_dx) dx = zeros(x.shape(), opts);
    if (need_dw) dw = zeros(w.shape(), opts);
    return {dx, dw, db};
  }
  const Tensor wk = nhwc && need_dx ? ops::contiguous(w, fmt) : w;  // KRSC for NHWC (dx's only)
  // cuDNN writes every element (beta 0): no zero fill first.
  auto plan_of = [&](ConvDirection d) -> const ConvPlan& {
    return conv_plans(d).get(conv_key(device, x, w, p, nhwc), [&] {
      auto pl = std::make_unique<ConvPlan>(x, w, p, nhwc);
      pl->yd.emplace(t, gy.size(0), gy.size(1), gy.size(2), gy.size(3), nhwc);
      if (d == ConvDirection::backward_data) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        int found = 0;
        if (timing_algorithms(device)) {
          FindScratch f(x, x.shape());
          QK_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
              h, pl->wd.d, wk.raw_data(), pl->yd->d, gy.raw_data(), pl->cd.d, pl->xd.d, f.out.raw_data(),
              CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, perf, f.ws.raw_data(), kMaxWorkspace));
        } else {
          QK_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, pl->wd.d, pl->yd->d, pl->cd.d, pl->xd.d,
                                                                     CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found,
                                                                     perf));
        }
        const auto algo = pick(perf, found, "backward-data");
        pl->algo = algo.algo, pl->memory = algo.memory;
      } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        int found = 0;
        if (timing_algorithms(device)) {
          FindScratch f(x, w.shape());
          QK_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
              h, pl->xd.d, x.raw_data(), pl->yd->d, gy.raw_data(), pl->cd.d, pl->wd.d, f.out.raw_data(),
              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, perf, f.ws.raw_data(), kMaxWorkspace));
        } else {
          QK_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, pl->xd.d, pl->yd->d, pl->cd.d, pl->wd.d,
                                                                       CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                                       &found, perf));
        }
        const auto algo = pick(perf, found, "backward-filter");
        pl->algo = algo.algo, pl->memory = algo.memory;
      }
      return pl;
    });
  };
  Scale s(t);
  if (need_dx) {
    const ConvPlan& plan = plan_of(ConvDirection::backward_data);
    dx = ops::empty(x.shape(), opts, fmt);
    Tensor ws = workspace(x, plan.memory);
    QK_CUDNN_CHECK(cudnnConvolutionBackwardData(h, s.one(), plan.wd.d, wk.raw_data(), plan.yd->d, gy.raw_data(),
                                                plan.cd.d, static_cast<cudnnConvolutionBwdDataAlgo_t>(plan.algo),
                                                ws.raw_data(), plan.memory, s.zero(), plan.xd.d, dx.raw_data()));
  }
  if (need_dw) {
    const ConvPlan& plan = plan_of(ConvDirection::backward_filter);
    dw = ops::empty(w.shape(), opts, fmt);  // KRSC for NHWC, made OIHW below
    Tensor ws = workspace(x, plan.memory);
    QK_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, s.one(), plan.xd.d, x.raw_data(), plan.yd->d, gy.raw_data(),
                                                  plan.cd.d, static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan.algo),
                                                  ws.raw_data(), plan.memory, s.zero(), plan.wd.d, dw.raw_data()));
    dw = ops::contiguous(dw);
  }
  return {dx, dw, db};
}

[[maybe_unused]] const bool registered = [] {
  ops::conv2d_fwd_kernel.set(DeviceType::cuda, &conv2d_on_device);
  ops::conv2d_bwd_kernel.set(DeviceType::cuda, &conv2d_backward_on_device);
  return true;
}();

}  // namespace

}  // namespace qk::cuda
