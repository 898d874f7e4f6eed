// The loopback device: a second backend for testing the harness (and the
// dispatch) where there is no GPU. It takes the privateuse1 slot; its memory
// is host memory behind its own allocator and copy, and each kernel it has
// runs the CPU kernel on host aliases of its tensors, then copies the
// tensors the CPU kernel returns onto the device. It registers only the
// kernel tables the public headers declare (qk/tensor/kernel_tables.h,
// qk/tensor/ops/attention.h), so it is incomplete on purpose: every other op
// shows in the harness's missing list, as a backend's gaps must.
//
//   qk::harness::install_loopback();     // register_backend + the kernels
//   qk::Tensor x = qk::ops::to_device(qk::ones({4}), qk::harness::kLoopback);
//   qk::harness::run(qk::harness::all_cases());   // cpu and privateuse1:0
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qk/tensor/device.h"

namespace qk::harness {

inline const Device kLoopback{DeviceType::privateuse1, 0};

// Copies that took the backend's asynchronous path, pinned host blocks
// alive (its pinned memory is plain host memory), and the raw device
// allocations its caching allocator made (a GPU's cudaMalloc calls).
struct LoopbackCounts {
  int64_t async_copies = 0;
  int64_t pinned_blocks = 0;
  int64_t raw_allocs = 0;
};
LoopbackCounts loopback_counts();

// install_loopback and every other kernel table of the CPU backend (the
// tensor layer's private ones, the optimizers' steps): a complete device,
// for testing the upper layers' device paths (models, trainers, GradScaler)
// without a GPU. Never in the same process as a test of the missing list.
void install_complete_loopback();

// Registers the loopback backend under privateuse1 and sets its kernels;
// calling it again restores any kernel a test replaced.
void install_loopback();
// The kernel tables it fills, by name.
std::vector<std::string> loopback_kernels();

}  // namespace qk::harness
