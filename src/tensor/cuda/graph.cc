// CUDA graph capture and replay (graph.h). The capture runs on a new
// non-blocking stream made current for the callable, in thread-local mode
// (other threads' calls are not affected); nothing runs at capture. Replay
// launches the instantiated graph on the device's current stream.
#include "graph.h"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "cuda_check.h"
#include "deferred_checks.h"
#include "qk/base/error.h"
#include "qk/tensor/cuda/stream.h"
#include "stream_handle.h"

namespace qk::cuda {

namespace {

thread_local int capturing_device = -1;

class CudaGraph final : public DeviceGraph {
 public:
  CudaGraph(int device, Stream stream, cudaGraph_t graph, cudaGraphExec_t exec, std::vector<void*> kept,
            std::vector<RecordedCheck> checks, CachingDeviceAllocator& alloc)
      : device_(device), stream_(std::move(stream)), graph_(graph), exec_(exec), kept_(std::move(kept)),
        checks_(std::move(checks)), alloc_(alloc) {
    size_t n = 0;
    if (cudaGraphGetNodes(graph_, nullptr, &n) == cudaSuccess) nodes_ = static_cast<int64_t>(n);
  }
  ~CudaGraph() override {
    // Its last replay may still run: the memory it uses goes back only after.
    int prev = 0;
    cudaGetDevice(&prev);
    if (prev != device_) cudaSetDevice(device_);
    (void)cudaDeviceSynchronize();
    alloc_.release_graph(stream_.id(), kept_);
    (void)cudaGraphExecDestroy(exec_);
    (void)cudaGraphDestroy(graph_);
    if (prev != device_) cudaSetDevice(prev);
  }

  void replay() override {
    QK_CHECK_DEVICE(capturing_device < 0, "cuda:", device_,
                    ": a graph cannot be replayed inside another graph's capture");
    DeviceGuard g(device_);
    const cudaStream_t s = current_stream_handle(device_);
    QK_CUDA_CHECK(cudaGraphLaunch(exec_, s));
    defer_recorded_checks(checks_, s);
  }
  int64_t num_nodes() const override { return nodes_; }

 private:
  int device_;
  Stream stream_;  // the capture's: its id names the graph's pool
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  std::vector<void*> kept_;
  std::vector<RecordedCheck> checks_;
  CachingDeviceAllocator& alloc_;
  int64_t nodes_ = 0;
};

}  // namespace

bool capturing(int device) { return capturing_device == device; }

std::unique_ptr<DeviceGraph> capture_graph(int device, const std::function<void()>& fn, CachingDeviceAllocator& alloc) {
  QK_CHECK_DEVICE(capturing_device < 0, "cuda:", device, ": a graph is already being captured on this thread (cuda:",
                  capturing_device, "); captures do not nest");
  DeviceGuard g(device);
  Stream side = Stream::create(device, /*non_blocking=*/true);
  const cudaStream_t s = stream_handle(side);
  std::vector<RecordedCheck> checks;
  alloc.begin_capture(device, side.id());
  // Undoes the capture's state on every way out.
  auto finish = [&] {
    set_check_sink(nullptr);
    capturing_device = -1;
    return alloc.end_capture(device);
  };
  cudaGraph_t graph = nullptr;
  try {
    QK_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    set_check_sink(&checks);
    capturing_device = device;
    {
      StreamGuard on(side);
      fn();
    }
  } catch (...) {
    cudaGraph_t broken = nullptr;
    (void)cudaStreamEndCapture(s, &broken);
    if (broken) (void)cudaGraphDestroy(broken);
    (void)cudaGetLastError();
    alloc.release_graph(side.id(), finish());
    throw;
  }
  const cudaError_t e = cudaStreamEndCapture(s, &graph);
  std::vector<void*> kept = finish();
  if (e != cudaSuccess || graph == nullptr) {
    (void)cudaGetLastError();
    if (graph) (void)cudaGraphDestroy(graph);
    alloc.release_graph(side.id(), kept);
    QK_THROW(DeviceError, "cuda:", device, ": the graph capture failed (", cudaGetErrorName(e), ": ",
             cudaGetErrorString(e), "): work in the captured step ran on a stream that did not join the capture, "
             "or waited for the device; run without graph capture");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ie = cudaGraphInstantiateWithFlags(&exec, graph, 0);
  if (ie != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaGraphDestroy(graph);
    alloc.release_graph(side.id(), kept);
    QK_THROW(DeviceError, "cuda:", device, ": the captured graph could not be instantiated (", cudaGetErrorName(ie),
             ": ", cudaGetErrorString(ie), ")");
  }
  return std::make_unique<CudaGraph>(device, std::move(side), graph, exec, std::move(kept), std::move(checks), alloc);
}

}  // namespace qk::cuda
