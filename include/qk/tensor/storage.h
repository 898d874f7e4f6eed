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
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool owned_ = false;
  std::function<void(void*)> deleter_;
};

}  // namespace qk
