// What NVML (the NVIDIA driver's management library) says about the GPUs:
// index, name, PCI bus id and NVLinks to other GPUs or to NVSwitches. NVML is
// loaded at run time with dlopen, so qccl builds and runs where there is no
// driver; then available() is false and detection uses hwloc alone.
#pragma once

#include <string>
#include <vector>

namespace qccl::topo {

struct NvmlGpu {
  int index = 0;
  std::string name;
  std::string pci;                  // "0000:1a:00.0", lower case, 4-digit domain
  std::vector<std::string> nvlink;  // bus id at the far end of each active link
};

struct NvmlInfo {
  bool available = false;
  std::string why;  // when not available: what was missing (for INFO logs)
  std::vector<NvmlGpu> gpus;
};

// Loads libnvidia-ml.so.1 once; never throws.
NvmlInfo query_nvml();

// "00000000:1A:00.0" -> "0000:1a:00.0"
std::string normalize_bus_id(const std::string& s);

}  // namespace qccl::topo
