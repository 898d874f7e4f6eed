#include "qk/tensor/backend.h"

#include <array>
#include <mutex>

#include "qk/base/error.h"
#include "qk/tensor/storage.h"
#include "cpu/cpu_backend.h"
#include "graph_rng.h"

namespace qk {

namespace {
std::array<Backend*, kNumDeviceTypes>& table() {
  static std::array<Backend*, kNumDeviceTypes> t = [] {
    std::array<Backend*, kNumDeviceTypes> a{};
    a[static_cast<int>(DeviceType::cpu)] = &cpu::cpu_backend();
    return a;
  }();
  return t;
}
}  // namespace

Backend& backend(DeviceType t) {
  Backend* b = table()[static_cast<int>(t)];
  QK_CHECK_DEVICE(b != nullptr, "no backend for device type '", device_type_name(t),
                  "' in this build; was qianka built with its toolkit (see `qk check`)?");
  return *b;
}

bool has_backend(DeviceType t) { return table()[static_cast<int>(t)] != nullptr; }

void register_backend(Backend* b) {
  QK_CHECK(b != nullptr, "register_backend: null backend");
  table()[static_cast<int>(b->type())] = b;
}

void check_device_usable(Device d) {
  if (d.is_cpu()) return;
  QK_CHECK_DEVICE(has_backend(d.type), d.str(), " is not available: this program has no backend for '",
                  device_type_name(d.type), "' (qianka built without its toolkit, or the program does not link "
                  "the backend's library)");
  const Backend& b = backend(d.type);
  const int n = b.device_count();
  QK_CHECK_DEVICE(n > 0, d.str(), " is not available: ", b.unavailable_reason());
  QK_CHECK_DEVICE(d.index >= 0 && d.index < n, d.str(), " does not exist: this machine has ", n, " ",
                  device_type_name(d.type), " device", n == 1 ? "" : "s", " (", device_type_name(d.type), ":0 to ",
                  device_type_name(d.type), ":", n - 1, ")");
}

MemoryStats memory_stats(Device d) { return backend(d.type).memory_stats(d.index); }
void reset_peak_memory(Device d) { backend(d.type).reset_peak_memory(d.index); }
void empty_cache(Device d) { backend(d.type).empty_cache(d.index); }
std::function<void()> record_fence(Device d) {
  if (d.is_cpu()) return [] {};
  return backend(d.type).record_fence(d.index);
}

void synchronize(Device d) {
  if (!d.is_cpu()) backend(d.type).synchronize(d.index);
}

std::unique_ptr<DeviceGraph> Backend::capture_graph(int index, const std::function<void()>&) {
  QK_THROW(DeviceError, Device(type(), index).str(),
           " cannot record its work into a graph (its backend has no graphs); run without graph capture");
}

namespace {

// A backend's graph with its random counters moved on before each replay.
class GraphWithRng final : public DeviceGraph {
 public:
  GraphWithRng(std::unique_ptr<DeviceGraph> g, std::unique_ptr<GraphRng> rng)
      : g_(std::move(g)), rng_(std::move(rng)) {}
  void replay() override {
    rng_->before_replay();
    g_->replay();
  }
  int64_t num_nodes() const override { return g_->num_nodes(); }

 private:
  std::unique_ptr<DeviceGraph> g_;
  std::unique_ptr<GraphRng> rng_;
};

}  // namespace

std::unique_ptr<DeviceGraph> capture_graph(Device d, const std::function<void()>& fn) {
  QK_CHECK_DEVICE(!d.is_cpu(), "the CPU has no device graphs to capture into (they are a GPU's); run without "
                  "graph capture on the CPU");
  auto rng = std::make_unique<GraphRng>(d);
  std::unique_ptr<DeviceGraph> g;
  try {
    GraphRngScope scope(rng.get());
    g = backend(d.type).capture_graph(d.index, fn);
  } catch (...) {
    rng->end();  // the generators as the capture found them
    throw;
  }
  rng->end();
  if (rng->empty()) return g;
  return std::make_unique<GraphWithRng>(std::move(g), std::move(rng));
}

bool capturing(Device d) { return !d.is_cpu() && has_backend(d.type) && backend(d.type).capturing(d.index); }

Device resolve_device(const std::string& spec, int local_rank) {
  Device dev(spec);  // ValueError naming the spec
  const bool by_rank = !dev.is_cpu() && spec.find(':') == std::string::npos;
  if (!by_rank) {
    check_device_usable(dev);
    return dev;
  }
  QK_CHECK(local_rank >= 0, "resolve_device: local rank must be >= 0, got ", local_rank);
  dev.index = local_rank;
  try {
    check_device_usable(dev);
  } catch (const DeviceError& e) {
    if (local_rank == 0) throw;
    QK_THROW(DeviceError, "'", spec, "' on local rank ", local_rank, " means ", dev.str(), ": ", e.message(),
             "; run at most as many ranks per host as it has devices, or name one ('", spec, ":0')");
  }
  return dev;
}

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device), owned_(true) {
  data_ = backend(device.type).allocate(nbytes, device.index);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter, bool pinned)
    : data_(data), nbytes_(nbytes), device_(device), owned_(false), pinned_(pinned), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (owned_) {
    backend(device_.type).deallocate(data_, nbytes_, device_.index);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace qk
