// NVML through dlopen: only the handful of entry points detection needs, with
// their ABI declared here (nvml.h is not needed to build).
#include "topo/nvml.h"

#include <dlfcn.h>

#include <cctype>
#include <cstdio>

namespace qccl::topo {

namespace {
using nvmlDevice_t = void*;
using nvmlReturn_t = int;  // 0: NVML_SUCCESS
// nvmlPciInfo_t as in nvml.h (v3 layout).
struct NvmlPciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
constexpr int kMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS

template <typename F>
F sym(void* lib, const char* name) {
  return reinterpret_cast<F>(::dlsym(lib, name));
}
}  // namespace

std::string normalize_bus_id(const std::string& s) {
  unsigned dom = 0, bus = 0, dev = 0, fn = 0;
  if (std::sscanf(s.c_str(), "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4) {
    std::string low = s;
    for (auto& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return low;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", dom & 0xffff, bus, dev, fn);
  return buf;
}

NvmlInfo query_nvml() {
  NvmlInfo info;
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    info.why = "libnvidia-ml.so.1 not found (no NVIDIA driver)";
    return info;
  }
  auto init = sym<nvmlReturn_t (*)()>(lib, "nvmlInit_v2");
  auto shutdown = sym<nvmlReturn_t (*)()>(lib, "nvmlShutdown");
  auto count = sym<nvmlReturn_t (*)(unsigned*)>(lib, "nvmlDeviceGetCount_v2");
  auto handle = sym<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(lib, "nvmlDeviceGetHandleByIndex_v2");
  auto name = sym<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>(lib, "nvmlDeviceGetName");
  auto pci = sym<nvmlReturn_t (*)(nvmlDevice_t, NvmlPciInfo*)>(lib, "nvmlDeviceGetPciInfo_v3");
  auto link_state = sym<nvmlReturn_t (*)(nvmlDevice_t, unsigned, int*)>(lib, "nvmlDeviceGetNvLinkState");
  auto link_remote =
      sym<nvmlReturn_t (*)(nvmlDevice_t, unsigned, NvmlPciInfo*)>(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  if (!init || !shutdown || !count || !handle || !pci) {
    info.why = "libnvidia-ml.so.1 lacks nvmlInit_v2/nvmlDeviceGetPciInfo_v3 (driver too old)";
    ::dlclose(lib);
    return info;
  }
  if (init() != 0) {
    info.why = "nvmlInit failed (driver not loaded?)";
    ::dlclose(lib);
    return info;
  }
  unsigned n = 0;
  if (count(&n) == 0) {
    info.available = true;
    for (unsigned i = 0; i < n; ++i) {
      nvmlDevice_t d = nullptr;
      NvmlPciInfo p{};
      if (handle(i, &d) != 0 || pci(d, &p) != 0) continue;
      NvmlGpu g;
      g.index = static_cast<int>(i);
      g.pci = normalize_bus_id(p.bus_id);
      char buf[96] = {0};
      if (name && name(d, buf, sizeof buf - 1) == 0) g.name = buf;
      for (unsigned l = 0; link_state && link_remote && l < kMaxLinks; ++l) {
        int active = 0;
        NvmlPciInfo r{};
        if (link_state(d, l, &active) != 0 || !active) continue;
        if (link_remote(d, l, &r) != 0) continue;
        g.nvlink.push_back(normalize_bus_id(r.bus_id));
      }
      info.gpus.push_back(std::move(g));
    }
  } else {
    info.why = "nvmlDeviceGetCount failed";
  }
  shutdown();
  ::dlclose(lib);
  return info;
}

}  // namespace qccl::topo
