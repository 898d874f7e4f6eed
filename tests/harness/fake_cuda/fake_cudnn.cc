// The fake cuDNN (see fake_cuda_runtime.h): handles and descriptors made and
// set, convolution algorithms chosen and convolutions "run" (counted, NHWC
// ones too; a mix of formats refused), and the graph API with no engines,
// so every fused-attention graph is refused at its heuristics.
#include <cudnn.h>

#include "harness/fake_cuda/fake_count.h"

struct cudnnContext {
  int unused = 0;
};
struct cudnnTensorStruct {
  int n = 0, c = 0, h = 0, w = 0;
  bool nhwc = false;
};
struct cudnnFilterStruct {
  int k = 0, c = 0, h = 0, w = 0;
  bool nhwc = false;  // KRSC
};
struct cudnnConvolutionStruct {
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
};
// A descriptor of cuDNN's graph API (cudnnBackendDescriptor_t is a void*).
struct FakeBackendDescriptor {
  cudnnBackendDescriptorType_t type;
};

using qk::fake_cuda::Counts;
using qk::fake_cuda::count;

extern "C" {

cudnnStatus_t cudnnCreate(cudnnHandle_t* h) {
  count(&Counts::cudnn_setup);
  *h = new cudnnContext;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t, cudaStream_t) {
  count();
  return CUDNN_STATUS_SUCCESS;
}
const char* cudnnGetErrorString(cudnnStatus_t) { return "an error of the fake cuDNN"; }
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) {
  count(&Counts::cudnn_setup);
  *d = new cudnnTensorStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
  count();
  delete d;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t, int n,
                                         int c, int h, int w) {
  count(&Counts::cudnn_setup);
  *d = {n, c, h, w, f == CUDNN_TENSOR_NHWC};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) {
  count(&Counts::cudnn_setup);
  *d = new cudnnFilterStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
  count();
  delete d;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t, cudnnTensorFormat_t f, int k,
                                         int c, int h, int w) {
  count(&Counts::cudnn_setup);
  *d = {k, c, h, w, f == CUDNN_TENSOR_NHWC};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) {
  count(&Counts::cudnn_setup);
  *d = new cudnnConvolutionStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
  count();
  delete d;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u, int v,
                                              int dil_h, int dil_w, cudnnConvolutionMode_t, cudnnDataType_t) {
  count(&Counts::cudnn_setup);
  *d = {pad_h, pad_w, u, v, dil_h, dil_w};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t, int) {
  count(&Counts::cudnn_setup);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t, cudnnMathType_t) {
  count(&Counts::cudnn_setup);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t cd,
                                                    const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
                                                    int* n, int* c, int* h, int* wo) {
  count(&Counts::cudnn_setup);
  *n = x->n;
  *c = w->k;
  *h = (x->h + 2 * cd->pad_h - cd->dil_h * (w->h - 1) - 1) / cd->stride_h + 1;
  *wo = (x->w + 2 * cd->pad_w - cd->dil_w * (w->w - 1) - 1) / cd->stride_w + 1;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                     const cudnnFilterDescriptor_t, const cudnnConvolutionDescriptor_t,
                                                     const cudnnTensorDescriptor_t, const int requested, int* returned,
                                                     cudnnConvolutionFwdAlgoPerf_t* perf) {
  count(&Counts::cudnn_algorithm_queries);
  if (requested < 1) return CUDNN_STATUS_BAD_PARAM;
  perf[0] = cudnnConvolutionFwdAlgoPerf_t{};
  perf[0].algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  perf[0].status = CUDNN_STATUS_SUCCESS;
  *returned = 1;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t, const cudnnFilterDescriptor_t,
                                                          const cudnnTensorDescriptor_t,
                                                          const cudnnConvolutionDescriptor_t,
                                                          const cudnnTensorDescriptor_t, const int requested,
                                                          int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
  count(&Counts::cudnn_algorithm_queries);
  if (requested < 1) return CUDNN_STATUS_BAD_PARAM;
  perf[0] = cudnnConvolutionBwdDataAlgoPerf_t{};
  perf[0].algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  perf[0].status = CUDNN_STATUS_SUCCESS;
  *returned = 1;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                            const cudnnTensorDescriptor_t,
                                                            const cudnnConvolutionDescriptor_t,
                                                            const cudnnFilterDescriptor_t, const int requested,
                                                            int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
  count(&Counts::cudnn_algorithm_queries);
  if (requested < 1) return CUDNN_STATUS_BAD_PARAM;
  perf[0] = cudnnConvolutionBwdFilterAlgoPerf_t{};
  perf[0].algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  perf[0].status = CUDNN_STATUS_SUCCESS;
  *returned = 1;
  return CUDNN_STATUS_SUCCESS;
}
// Benchmark mode's timed searches (cudnnFind*Ex): counted as algorithm
// queries and as finds; the algorithms listed "fastest first" are the
// heuristics' own here (the fake times nothing).
cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t h, const cudnnTensorDescriptor_t x, const void*,
                                                     const cudnnFilterDescriptor_t w, const void*,
                                                     const cudnnConvolutionDescriptor_t c,
                                                     const cudnnTensorDescriptor_t y, void*, const int requested,
                                                     int* returned, cudnnConvolutionFwdAlgoPerf_t* perf, void*,
                                                     size_t) {
  qk::fake_cuda::count(&Counts::cudnn_finds);
  return cudnnGetConvolutionForwardAlgorithm_v7(h, x, w, c, y, requested, returned, perf);
}
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(cudnnHandle_t h, const cudnnFilterDescriptor_t w,
                                                          const void*, const cudnnTensorDescriptor_t dy, const void*,
                                                          const cudnnConvolutionDescriptor_t c,
                                                          const cudnnTensorDescriptor_t dx, void*, const int requested,
                                                          int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf,
                                                          void*, size_t) {
  qk::fake_cuda::count(&Counts::cudnn_finds);
  return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w, dy, c, dx, requested, returned, perf);
}
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                                                            const void*, const cudnnTensorDescriptor_t dy, const void*,
                                                            const cudnnConvolutionDescriptor_t c,
                                                            const cudnnFilterDescriptor_t dw, void*, const int requested,
                                                            int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf,
                                                            void*, size_t) {
  qk::fake_cuda::count(&Counts::cudnn_finds);
  return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x, dy, c, dw, requested, returned, perf);
}
// A convolution's three operands in one format: NCHW/KCRS or NHWC/KRSC (a
// mix is what qk never asks for; the fake refuses it). Counts the NHWC ones.
static cudnnStatus_t fake_convolution(const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                                      const cudnnTensorStruct* y) {
  count(&Counts::cudnn_calls);
  if (x->nhwc != w->nhwc || x->nhwc != y->nhwc) return CUDNN_STATUS_NOT_SUPPORTED;
  if (x->nhwc) count(&Counts::cudnn_nhwc_convolutions, /*call=*/false);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t, const void*, const cudnnTensorDescriptor_t x, const void*,
                                      const cudnnFilterDescriptor_t w, const void*, const cudnnConvolutionDescriptor_t,
                                      cudnnConvolutionFwdAlgo_t, void*, size_t, const void*,
                                      const cudnnTensorDescriptor_t y, void*) {
  return fake_convolution(x, w, y);
}
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t, const void*, const cudnnFilterDescriptor_t w, const void*,
                                           const cudnnTensorDescriptor_t dy, const void*,
                                           const cudnnConvolutionDescriptor_t, cudnnConvolutionBwdDataAlgo_t, void*,
                                           size_t, const void*, const cudnnTensorDescriptor_t dx, void*) {
  return fake_convolution(dx, w, dy);
}
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t, const void*, const cudnnTensorDescriptor_t x, const void*,
                                             const cudnnTensorDescriptor_t dy, const void*,
                                             const cudnnConvolutionDescriptor_t, cudnnConvolutionBwdFilterAlgo_t,
                                             void*, size_t, const void*, const cudnnFilterDescriptor_t dw, void*) {
  return fake_convolution(x, dw, dy);
}
cudnnStatus_t cudnnAddTensor(cudnnHandle_t, const void*, const cudnnTensorDescriptor_t, const void*, const void*,
                             const cudnnTensorDescriptor_t, void*) {
  count(&Counts::cudnn_calls);
  return CUDNN_STATUS_SUCCESS;
}

// cuDNN's graph API, as cudnn-frontend calls it for the fused attention:
// descriptors are made, set and finalized, but the fake has no engines, so
// a heuristics query finds none and every graph is refused, as a GPU's cuDNN
// refuses a shape it has no engine for (the callers then take qk's kernels).
cudnnStatus_t cudnnGetStream(cudnnHandle_t, cudaStream_t* s) {
  count();
  *s = nullptr;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* d) {
  count(&Counts::cudnn_setup);
  *d = new FakeBackendDescriptor{type};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d) {
  count();
  delete static_cast<FakeBackendDescriptor*>(d);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t, const void*) {
  count(&Counts::cudnn_setup);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t) {
  count(&Counts::cudnn_setup);
  return CUDNN_STATUS_SUCCESS;
}
// Every attribute reads back as none (zero elements): no engine configurations, no engines.
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t, int64_t* element_count, void*) {
  count(static_cast<FakeBackendDescriptor*>(d)->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR
            ? &Counts::cudnn_algorithm_queries
            : nullptr);
  if (element_count) *element_count = 0;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t) {
  count(&Counts::cudnn_calls);
  return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"
