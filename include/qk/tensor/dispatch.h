// Per-op kernel tables: the seam where a device backend plugs in kernels.
//
//   // declare once (header):
//   using Conv2dFwdFn = Tensor(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams&);
//   QK_DECLARE_KERNEL(conv2d_fwd_kernel, Conv2dFwdFn);
//   // define once (.cc of the op):
//   QK_DEFINE_KERNEL(conv2d_fwd_kernel, Conv2dFwdFn);
//   // the CPU kernel registers in the op's .cc (so linking the op links it);
//   // another backend calls .set() from its own init function:
//   QK_REGISTER_KERNEL(conv2d_fwd_kernel, cpu, cpu::conv2d_forward);
//   // the op calls:
//   return conv2d_fwd_kernel.get(x.device())(x, w, b, p);
//
// get() on a device without a kernel throws DeviceError "'conv2d_fwd_kernel'
// is not implemented for cuda:0", so a backend may implement only part of
// the op set (ggml's supports_op).
#pragma once

#include <array>

#include "qk/base/error.h"
#include "qk/tensor/device.h"

namespace qk {

template <typename Fn>
class KernelTable {
 public:
  constexpr explicit KernelTable(const char* name) : name_(name) {}
  void set(DeviceType t, Fn* fn) { fns_[static_cast<int>(t)] = fn; }
  bool supports(DeviceType t) const {
    return fns_[static_cast<int>(t)] != nullptr;
  }
  Fn* get(Device d) const {
    Fn* fn = fns_[static_cast<int>(d.type)];
    QK_CHECK_DEVICE(fn != nullptr, "'", name_, "' is not implemented for device ", d.str(),
                    "; move the tensors to a device that supports it (e.g. .to(\"cpu\"))");
    return fn;
  }
  const char* name() const { return name_; }

 private:
  const char* name_;
  std::array<Fn*, kNumDeviceTypes> fns_{};
};

}  // namespace qk

#define QK_DECLARE_KERNEL(table, Fn) extern ::qk::KernelTable<Fn> table
#define QK_DEFINE_KERNEL(table, Fn) constinit ::qk::KernelTable<Fn> table(#table)
// Static registration in the op's own translation unit: KernelTable is
// constant-initialised, so there is no static-initialisation-order problem.
#define QK_REGISTER_KERNEL(table, dev, fn)                                          \
  [[maybe_unused]] static const bool qk_kernel_reg_##table##_##dev =                \
      (table.set(::qk::DeviceType::dev, &fn), true)
