#include "qk/tensor/device.h"

#include <charconv>
#include <mutex>

#include "qk/base/error.h"

namespace qk {

namespace {
std::string& privateuse1_name() {
  static std::string n = "privateuse1";
  return n;
}
}  // namespace

void rename_privateuse1(const std::string& name) { privateuse1_name() = name; }

const char* device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::cpu: return "cpu";
    case DeviceType::cuda: return "cuda";
    case DeviceType::privateuse1: return privateuse1_name().c_str();
  }
  return "?";
}

Device::Device(DeviceType t, int i) : type(t), index(i) {
  QK_CHECK(i >= 0, "Device: index must be >= 0, got ", i);
  QK_CHECK(t != DeviceType::cpu || i == 0, "Device: the CPU has only index 0, got cpu:", i);
}

Device::Device(std::string_view s) {
  auto colon = s.find(':');
  std::string_view name = s.substr(0, colon);
  if (name == "cpu") type = DeviceType::cpu;
  else if (name == "cuda") type = DeviceType::cuda;
  else if (name == "privateuse1" || name == privateuse1_name()) type = DeviceType::privateuse1;
  else QK_THROW(ValueError, "unknown device '", s, "'; expected cpu, cuda, cuda:N or ", privateuse1_name());
  index = 0;
  if (colon != std::string_view::npos) {
    std::string_view num = s.substr(colon + 1);
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
    QK_CHECK(ec == std::errc() && p == num.data() + num.size() && index >= 0 && !num.empty(),
             "bad device index in '", s, "'; expected e.g. cuda:0");
  }
  QK_CHECK(type != DeviceType::cpu || index == 0, "the CPU has only index 0, got '", s, "'");
}

std::string Device::str() const {
  if (type == DeviceType::cpu) return "cpu";
  return std::string(device_type_name(type)) + ":" + std::to_string(index);
}

}  // namespace qk
