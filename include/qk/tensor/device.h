// Where a tensor lives: {type, index}, parseable from "cpu", "cuda", "cuda:1".
//
//   qk::Device d("cuda:1");     // d.type == DeviceType::cuda, d.index == 1
//   d.str();                    // "cuda:1"
//
// `privateuse1` is the slot for another vendor's accelerator (as PyTorch's
// PrivateUse1 is for torch_musa): a backend registered under it is reached
// by "privateuse1" or by the name it registers with rename_privateuse1().
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace qk {

enum class DeviceType : int8_t { cpu = 0, cuda = 1, privateuse1 = 2 };
inline constexpr int kNumDeviceTypes = 3;

const char* device_type_name(DeviceType t);
// Gives the privateuse1 slot a name ("musa"), so Device("musa:0") parses.
void rename_privateuse1(const std::string& name);

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  Device() = default;
  Device(DeviceType t, int i = 0);
  // "cpu", "cuda", "cuda:0"; throws ValueError on anything else.
  Device(std::string_view s);
  Device(const char* s) : Device(std::string_view(s)) {}

  bool is_cpu() const { return type == DeviceType::cpu; }
  std::string str() const;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }
inline const Device kCPU{DeviceType::cpu, 0};

}  // namespace qk

template <>
struct std::hash<qk::Device> {
  size_t operator()(const qk::Device& d) const noexcept {
    return (static_cast<size_t>(d.type) << 16) ^ static_cast<size_t>(d.index);
  }
};
