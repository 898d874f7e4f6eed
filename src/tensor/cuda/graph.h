// CUDA graphs behind Backend::capture_graph (qk/tensor/backend.h): the work
// a callable queues is captured on a stream of its own, with the caching
// allocator keeping the graph's memory (device_allocator.h) and the input
// checks it defers re-armed at each replay (deferred_checks.h).
#pragma once

#include <functional>
#include <memory>

#include "device_allocator.h"
#include "qk/tensor/backend.h"

namespace qk::cuda {

std::unique_ptr<DeviceGraph> capture_graph(int device, const std::function<void()>& fn, CachingDeviceAllocator& alloc);
// Whether the calling thread is capturing on `device`.
bool capturing(int device);

}  // namespace qk::cuda
