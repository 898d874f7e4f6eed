// A counting fake of the CUDA runtime, cuBLASLt and cuDNN, for machines
// without a GPU: a program that links fake_cuda_runtime.cc gets its
// definitions of every entry point the CUDA backend calls (the linker takes a
// program's own definitions before the shared libraries'), so the backend's
// real host code runs - dispatch, the caching allocator, streams and events,
// plan caches, cuBLASLt and cuDNN set-up - against one device that computes
// nothing. It counts what a step asks of the runtime: kernel launches (by
// name), device and pinned allocations, copies, host waits, library set-up
// and heuristic queries, so tests can assert what a steady-state training
// step must not do (docs/cuda.md "Host time").
//
// Graphs: work queued during a capture is recorded, not run (nor counted as
// run); each cudaGraphLaunch counts the recorded kernels, GEMMs,
// convolutions and device copies again and redoes the copies and memsets.
// A host wait during a capture fails as CUDA's does (and breaks it), as do
// the "potentially unsafe" calls (cudaMalloc, cudaFree, cudaHostAlloc, event
// and stream queries) unless the thread's mode was relaxed around them.
//
// Kernels do not run: what the host reads back is what it wrote itself
// (copies, memsets) or zeros, so only code whose flow does not depend on
// computed values is meaningful here.
//
//   const qk::fake_cuda::Counts before = qk::fake_cuda::counts();
//   ... one training step on cuda:0 ...
//   const qk::fake_cuda::Counts step = qk::fake_cuda::counts() - before;
//   EXPECT_EQ(step.device_allocs, 0);
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace qk::fake_cuda {

struct Counts {
  int64_t runtime_calls = 0;   // every entry point of the three libraries
  int64_t launches = 0;        // our kernels (<<<...>>>)
  int64_t device_allocs = 0, device_frees = 0;  // cudaMalloc, cudaFree
  int64_t pinned_allocs = 0;                    // cudaHostAlloc
  int64_t copies_to_host = 0, copies_to_device = 0, copies_on_device = 0, memsets = 0;
  int64_t syncs = 0;           // the host waiting: stream, device and event synchronizations
  int64_t events_created = 0, streams_created = 0;
  int64_t blaslt_setup = 0;    // cuBLASLt handles, descriptors, layouts and preferences made or set
  int64_t blaslt_heuristics = 0, blaslt_matmuls = 0;
  int64_t cudnn_setup = 0;     // cuDNN handles and descriptors made or set
  int64_t cudnn_algorithm_queries = 0, cudnn_calls = 0;
  int64_t cudnn_finds = 0;     // of the queries, timed searches (cudnnFind*: benchmark mode)
  int64_t cudnn_nhwc_convolutions = 0;  // of cudnn_calls, convolutions on NHWC tensors (channels last)
  int64_t attribute_calls = 0; // device properties and attributes, function attributes, occupancy
  int64_t graph_launches = 0;  // cudaGraphLaunch: the graph's recorded work counts as run then
  std::map<std::string, int64_t> kernels;  // launches per kernel (demangled name)

  Counts operator-(const Counts& before) const;
  // Kernels on the device of any kind: ours, cuBLASLt's and cuDNN's.
  int64_t device_work() const { return launches + blaslt_matmuls + cudnn_calls; }
};

// Since the program started; thread-safe.
Counts counts();

// Called at each kernel launch with the kernel's name and arguments
// (args[i] points to parameter i), so a test can play a kernel's part, e.g.
// set the error flag an index check would set. Empty: none.
void set_launch_hook(std::function<void(const std::string& name, void** args)> hook);

// The kernels of `c` as lines "count  name", most launched first (at most `top`).
std::string kernel_table(const Counts& c, int top = 20);

}  // namespace qk::fake_cuda
