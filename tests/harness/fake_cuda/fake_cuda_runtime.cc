// The counting fake of the CUDA runtime and cuBLASLt (cuDNN: fake_cudnn.cc)
// (fake_cuda_runtime.h): the entry points the CUDA backend calls (`nm -u` of
// libqk_tensor_cuda.a lists them), each counted. Device memory is host
// memory (zeroed when allocated); kernels, GEMMs and convolutions write
// nothing, so the host reads back only what it put there itself (copies,
// memsets: a kernel's error flag reads "none"). One device, shaped like an H100.
#include "harness/fake_cuda/fake_cuda_runtime.h"
#include "harness/fake_cuda/fake_count.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

// The libraries' opaque handles, defined here (their headers only declare them).
struct CUstream_st {
  int unused = 0;
};
struct CUevent_st {
  int unused = 0;
};
struct cublasLtContext {
  int unused = 0;
};
// A captured graph: the device work recorded (counts, and the copies and
// memsets to redo at each launch).
struct FakeGraphWork {
  qk::fake_cuda::Counts work;
  std::vector<std::function<void()>> effects;
  bool invalidated = false;
};
struct CUgraph_st {
  FakeGraphWork g;
};
struct CUgraphExec_st {
  FakeGraphWork g;
};
namespace qk::fake_cuda {

namespace {

constexpr size_t kDeviceBytes = size_t(80) << 30;
constexpr int kMultiprocessors = 132;
constexpr int kSharedOptin = 227 << 10;

struct State {
  std::mutex mu;
  Counts c;
  std::map<uintptr_t, size_t> device, pinned;  // base -> bytes
  std::map<const void*, std::string> names;   // host stub -> device function name
  std::function<void(const std::string&, void**)> hook;
};

State& state() {
  static State* s = new State;  // never destroyed: kernels are registered at start-up, freed at exit
  return *s;
}

thread_local int current_device = 0;
thread_local FakeGraphWork* recording = nullptr;  // the capture open on this thread
thread_local cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;  // the thread's interaction mode

// A "potentially unsafe" call (cudaMalloc, cudaHostAlloc, cudaFree, queries)
// during a capture not relaxed for this thread breaks it, as CUDA does.
bool unsafe_during_capture() {
  if (!recording || capture_mode == cudaStreamCaptureModeRelaxed) return false;
  recording->invalidated = true;
  return true;
}

// The device's work, as opposed to the host's calls: recorded during a capture.
bool is_device_work(int64_t Counts::*field) {
  return field == &Counts::blaslt_matmuls || field == &Counts::cudnn_calls ||
         field == &Counts::cudnn_nhwc_convolutions || field == &Counts::copies_on_device ||
         field == &Counts::copies_to_device || field == &Counts::copies_to_host || field == &Counts::memsets;
}

// A wait for the device: refused (and the capture broken) while capturing, as CUDA does.
cudaError_t host_wait() {
  if (recording) {
    recording->invalidated = true;
    return cudaErrorStreamCaptureUnsupported;
  }
  return cudaSuccess;
}
thread_local struct {
  dim3 grid, block;
  size_t smem = 0;
  cudaStream_t stream = nullptr;
} pending_launch;

}  // namespace

// fake_count.h
void count(int64_t Counts::*field, bool call) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (call) ++s.c.runtime_calls;
  if (!field) return;
  if (recording && is_device_work(field)) ++(recording->work.*field);
  else if (!(recording && field == &Counts::syncs)) ++(s.c.*field);
}

namespace {

bool in(const std::map<uintptr_t, size_t>& blocks, const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = blocks.upper_bound(a);
  if (it == blocks.begin()) return false;
  --it;
  return a < it->first + std::max<size_t>(it->second, 1);
}

bool is_device(const void* p) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return in(s.device, p);
}

std::string demangle(const std::string& name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : name;
}

}  // namespace

Counts Counts::operator-(const Counts& b) const {
  Counts d;
  d.runtime_calls = runtime_calls - b.runtime_calls;
  d.launches = launches - b.launches;
  d.device_allocs = device_allocs - b.device_allocs;
  d.device_frees = device_frees - b.device_frees;
  d.pinned_allocs = pinned_allocs - b.pinned_allocs;
  d.copies_to_host = copies_to_host - b.copies_to_host;
  d.copies_to_device = copies_to_device - b.copies_to_device;
  d.copies_on_device = copies_on_device - b.copies_on_device;
  d.memsets = memsets - b.memsets;
  d.syncs = syncs - b.syncs;
  d.events_created = events_created - b.events_created;
  d.streams_created = streams_created - b.streams_created;
  d.blaslt_setup = blaslt_setup - b.blaslt_setup;
  d.blaslt_heuristics = blaslt_heuristics - b.blaslt_heuristics;
  d.blaslt_matmuls = blaslt_matmuls - b.blaslt_matmuls;
  d.cudnn_setup = cudnn_setup - b.cudnn_setup;
  d.cudnn_algorithm_queries = cudnn_algorithm_queries - b.cudnn_algorithm_queries;
  d.cudnn_calls = cudnn_calls - b.cudnn_calls;
  d.attribute_calls = attribute_calls - b.attribute_calls;
  d.graph_launches = graph_launches - b.graph_launches;
  d.cudnn_finds = cudnn_finds - b.cudnn_finds;
  d.cudnn_nhwc_convolutions = cudnn_nhwc_convolutions - b.cudnn_nhwc_convolutions;
  for (const auto& [k, n] : kernels) {
    auto it = b.kernels.find(k);
    const int64_t m = n - (it == b.kernels.end() ? 0 : it->second);
    if (m != 0) d.kernels[k] = m;
  }
  return d;
}

Counts counts() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.c;
}

void set_launch_hook(std::function<void(const std::string& name, void** args)> hook) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.hook = std::move(hook);
}

std::string kernel_table(const Counts& c, int top) {
  std::vector<std::pair<int64_t, std::string>> rows;
  for (const auto& [name, n] : c.kernels) rows.emplace_back(n, name);
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::ostringstream out;
  for (int i = 0; i < static_cast<int>(rows.size()) && i < top; ++i) {
    std::string name = rows[i].second;
    if (name.size() > 110) name = name.substr(0, 107) + "...";
    out << "  " << rows[i].first << "  " << name << "\n";
  }
  return out.str();
}

}  // namespace qk::fake_cuda

using qk::fake_cuda::Counts;
using qk::fake_cuda::count;
using qk::fake_cuda::state;

// ---- the runtime: kernel registration and launch -----------------------------

extern "C" {

void** __cudaRegisterFatBinary(void*) {
  static void* handle = nullptr;
  return &handle;
}
void __cudaRegisterFatBinaryEnd(void**) {}
void __cudaUnregisterFatBinary(void**) {}
void __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int) {}
void __cudaRegisterFunction(void**, const char* host_fun, char*, const char* device_name, int, uint3*, uint3*, dim3*,
                            dim3*, int*) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.names[host_fun] = qk::fake_cuda::demangle(device_name);
}

unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t smem, struct CUstream_st* stream) {
  qk::fake_cuda::pending_launch = {grid, block, smem, stream};
  return 0;
}
cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* smem, void* stream) {
  *grid = qk::fake_cuda::pending_launch.grid;
  *block = qk::fake_cuda::pending_launch.block;
  *smem = qk::fake_cuda::pending_launch.smem;
  *static_cast<cudaStream_t*>(stream) = qk::fake_cuda::pending_launch.stream;
  return cudaSuccess;
}
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* fun) {
  *kernel = reinterpret_cast<cudaKernel_t>(const_cast<void*>(fun));
  return cudaSuccess;
}

}  // extern "C"

namespace {
cudaError_t launch(const void* fun, void** args) {
  auto& s = state();
  std::function<void(const std::string&, void**)> hook;
  std::string name;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.c.runtime_calls;
    auto it = s.names.find(fun);
    name = it == s.names.end() ? std::string("(unregistered kernel)") : it->second;
    FakeGraphWork* const rec = qk::fake_cuda::recording;
    qk::fake_cuda::Counts& to = rec ? rec->work : s.c;  // captured kernels run at the graph's launches
    ++to.launches;
    ++to.kernels[name];
    if (!rec) hook = s.hook;
  }
  if (hook) hook(name, args);
  return cudaSuccess;
}
}  // namespace

extern "C" {

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3, dim3, void** args, size_t, cudaStream_t) {
  return launch(reinterpret_cast<const void*>(kernel), args);
}
cudaError_t cudaLaunchKernel(const void* func, dim3, dim3, void** args, size_t, cudaStream_t) {
  return launch(func, args);
}

// ---- devices --------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* n) {
  count();
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  count();
  *d = qk::fake_cuda::current_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  count();
  if (d != 0) return cudaErrorInvalidDevice;
  qk::fake_cuda::current_device = d;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* p, int d) {
  count(&Counts::attribute_calls);
  if (d != 0) return cudaErrorInvalidDevice;
  *p = cudaDeviceProp{};
  std::strcpy(p->name, "qk fake GPU (computes nothing)");
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = qk::fake_cuda::kMultiprocessors;
  p->totalGlobalMem = qk::fake_cuda::kDeviceBytes;
  p->l2CacheSize = 50 << 20;
  p->sharedMemPerBlock = 48 << 10;
  p->sharedMemPerBlockOptin = qk::fake_cuda::kSharedOptin;
  p->sharedMemPerMultiprocessor = 228 << 10;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsPerMultiProcessor = 2048;
  p->warpSize = 32;
  p->regsPerBlock = 65536;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* v, enum cudaDeviceAttr attr, int d) {
  count(&Counts::attribute_calls);
  if (d != 0) return cudaErrorInvalidDevice;
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *v = qk::fake_cuda::kMultiprocessors; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = qk::fake_cuda::kSharedOptin; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = 48 << 10; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = 228 << 10; break;
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = 2048; break;
    case cudaDevAttrWarpSize: *v = 32; break;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    case cudaDevAttrMaxRegistersPerBlock: *v = 65536; break;
    case cudaDevAttrMaxGridDimX: *v = 0x7fffffff; break;
    case cudaDevAttrMaxGridDimY: case cudaDevAttrMaxGridDimZ: *v = 65535; break;
    case cudaDevAttrL2CacheSize: *v = 50 << 20; break;
    default: *v = 0; break;
  }
  return cudaSuccess;
}
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* a, const void*) {
  count(&Counts::attribute_calls);
  *a = cudaFuncAttributes{};
  a->maxThreadsPerBlock = 1024;
  a->ptxVersion = 90;
  a->binaryVersion = 90;
  a->numRegs = 32;
  return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void*, enum cudaFuncAttribute, int) {
  count(&Counts::attribute_calls);
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void*, int, size_t, unsigned) {
  count(&Counts::attribute_calls);
  *blocks = 4;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  count();
  *free_bytes = *total = qk::fake_cuda::kDeviceBytes;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  count();
  *v = 13000;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  count();
  *v = 13000;
  return cudaSuccess;
}
cudaError_t cudaGetLastError() {
  count();
  return cudaSuccess;
}
cudaError_t cudaPeekAtLastError() {
  count();
  return cudaSuccess;
}
const char* cudaGetErrorName(cudaError_t) { return "cudaErrorFake"; }
const char* cudaGetErrorString(cudaError_t) { return "an error of the fake CUDA runtime"; }
cudaError_t cudaDeviceSynchronize() {
  count(&Counts::syncs);
  return qk::fake_cuda::host_wait();
}

// ---- memory ---------------------------------------------------------------------

cudaError_t cudaMalloc(void** p, size_t bytes) {
  count(&Counts::device_allocs);
  if (qk::fake_cuda::unsafe_during_capture()) return cudaErrorStreamCaptureUnsupported;
  const size_t n = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  *p = std::aligned_alloc(256, n);
  if (!*p) return cudaErrorMemoryAllocation;
  std::memset(*p, 0, n);
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.device[reinterpret_cast<uintptr_t>(*p)] = n;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  count(&Counts::device_frees);
  if (qk::fake_cuda::unsafe_during_capture()) return cudaErrorStreamCaptureUnsupported;
  if (!p) return cudaSuccess;
  {
    auto& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    s.device.erase(reinterpret_cast<uintptr_t>(p));
  }
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
  count(&Counts::pinned_allocs);
  if (qk::fake_cuda::unsafe_during_capture()) return cudaErrorStreamCaptureUnsupported;
  *p = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
  if (!*p) return cudaErrorMemoryAllocation;
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.pinned[reinterpret_cast<uintptr_t>(*p)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  count();
  {
    auto& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    s.pinned.erase(reinterpret_cast<uintptr_t>(p));
  }
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* a, const void* p) {
  count();
  *a = cudaPointerAttributes{};
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (qk::fake_cuda::in(s.device, p)) {
    a->type = cudaMemoryTypeDevice;
    a->devicePointer = const_cast<void*>(p);
  } else if (qk::fake_cuda::in(s.pinned, p)) {
    a->type = cudaMemoryTypeHost;
    a->hostPointer = const_cast<void*>(p);
  } else {
    a->type = cudaMemoryTypeUnregistered;
  }
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, enum cudaMemcpyKind, cudaStream_t) {
  const bool from_device = qk::fake_cuda::is_device(src), to_device = qk::fake_cuda::is_device(dst);
  if (qk::fake_cuda::recording) {
    if (!from_device || !to_device) {  // pageable host memory cannot be captured (pinned could; not needed here)
      qk::fake_cuda::recording->invalidated = true;
      count();
      return cudaErrorStreamCaptureUnsupported;
    }
    count(&Counts::copies_on_device);
    qk::fake_cuda::recording->effects.push_back([=] { std::memmove(dst, src, bytes); });
    return cudaSuccess;
  }
  if (from_device && to_device) {
    count(&Counts::copies_on_device);
    std::memmove(dst, src, bytes);
  } else if (to_device) {
    count(&Counts::copies_to_device);
    std::memcpy(dst, src, bytes);
  } else if (from_device) {
    count(&Counts::copies_to_host);
    std::memcpy(dst, src, bytes);  // what the host put there (copies, memsets): kernels write nothing
  } else {
    count();
    std::memmove(dst, src, bytes);
  }
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) {
  count(&Counts::memsets);
  if (qk::fake_cuda::recording) {
    qk::fake_cuda::recording->effects.push_back([=] { std::memset(p, value, bytes); });
    return cudaSuccess;
  }
  std::memset(p, value, bytes);
  return cudaSuccess;
}

// ---- streams and events -----------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  count(&Counts::streams_created);
  *s = new CUstream_st;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  count();
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t) {
  count();
  return qk::fake_cuda::unsafe_during_capture() ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  count(&Counts::syncs);
  return qk::fake_cuda::host_wait();
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) {
  count();
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  count(&Counts::events_created);
  *e = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  count();
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) {
  count();
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t) {
  count();
  return qk::fake_cuda::unsafe_during_capture() ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) {
  count(&Counts::syncs);
  return qk::fake_cuda::host_wait();
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  count();
  *ms = 0;
  return cudaSuccess;
}

// ---- graphs -------------------------------------------------------------------------

cudaError_t cudaStreamBeginCapture(cudaStream_t, enum cudaStreamCaptureMode mode) {
  count();
  if (qk::fake_cuda::recording) return cudaErrorIllegalState;
  qk::fake_cuda::recording = new FakeGraphWork;
  qk::fake_cuda::capture_mode = mode;
  return cudaSuccess;
}
cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
  count();
  std::swap(*mode, qk::fake_cuda::capture_mode);
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t* graph) {
  count();
  if (!qk::fake_cuda::recording) return cudaErrorIllegalState;
  std::unique_ptr<FakeGraphWork> done(qk::fake_cuda::recording);
  qk::fake_cuda::recording = nullptr;
  qk::fake_cuda::capture_mode = cudaStreamCaptureModeGlobal;
  *graph = new CUgraph_st{std::move(*done)};
  return (*graph)->g.invalidated ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
}
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  count();
  *exec = new CUgraphExec_st{graph->g};
  return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t*, size_t* n) {
  count();
  const qk::fake_cuda::Counts& w = graph->g.work;
  *n = static_cast<size_t>(w.device_work() + w.copies_on_device + w.memsets);
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t) {
  if (qk::fake_cuda::recording) {
    count();
    return cudaErrorStreamCaptureUnsupported;
  }
  {
    auto& s = qk::fake_cuda::state();
    std::lock_guard<std::mutex> lock(s.mu);
    qk::fake_cuda::Counts& c = s.c;
    const qk::fake_cuda::Counts& w = exec->g.work;
    ++c.runtime_calls;
    ++c.graph_launches;
    c.launches += w.launches;
    c.blaslt_matmuls += w.blaslt_matmuls;
    c.cudnn_calls += w.cudnn_calls;
    c.cudnn_nhwc_convolutions += w.cudnn_nhwc_convolutions;
    c.copies_on_device += w.copies_on_device;
    c.memsets += w.memsets;
    for (const auto& [name, n] : w.kernels) c.kernels[name] += n;
  }
  for (const auto& effect : exec->g.effects) effect();
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  count();
  delete exec;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  count();
  delete graph;
  return cudaSuccess;
}

// ---- cuBLASLt ---------------------------------------------------------------------

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  count(&Counts::blaslt_setup);
  *h = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasLtGetStatusName(cublasStatus_t) { return "CUBLAS_STATUS_FAKE"; }
const char* cublasLtGetStatusString(cublasStatus_t) { return "an error of the fake cuBLASLt"; }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t, cudaDataType_t) {
  count(&Counts::blaslt_setup);
  *d = new cublasLtMatmulDescOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  count();
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void*,
                                              size_t) {
  count(&Counts::blaslt_setup);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType, uint64_t, uint64_t, int64_t) {
  count(&Counts::blaslt_setup);
  *l = new cublasLtMatrixLayoutOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  count();
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t, const void*,
                                                size_t) {
  count(&Counts::blaslt_setup);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  count(&Counts::blaslt_setup);
  *p = new cublasLtMatmulPreferenceOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  count();
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                                                    const void*, size_t) {
  count(&Counts::blaslt_setup);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  count(&Counts::blaslt_heuristics);
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t, const void*, const void*,
                              cublasLtMatrixLayout_t, const void*, cublasLtMatrixLayout_t, const void*, const void*,
                              cublasLtMatrixLayout_t, void*, cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t*,
                              void*, size_t, cudaStream_t) {
  count(&Counts::blaslt_matmuls);
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
