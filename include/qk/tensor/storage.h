// A block of device memory shared by a tensor and its views.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "qk/tensor/device.h"

namespace qk {

class Storage {
 public:
  // Allocates nbytes on `device` through its backend.
  Storage(size_t nbytes, Device device);
  // Wraps memory owned elsewhere (an mmap, a caller's buffer); `deleter` runs
  // when the last tensor using it goes away (may be empty).
  // pinned: host memory page-locked for a device's copies (Tensor::pin_memory).
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter, bool pinned = false);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool owned_ = false;
  bool pinned_ = false;
  std::function<void(void*)> deleter_;
};

}  // namespace qk
