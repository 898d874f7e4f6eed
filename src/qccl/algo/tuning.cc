#include "algo/tuning.h"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "algo/cost_model.h"
#include "transport/registry.h"
#include "core/debug.h"
#include "qk/base/env.h"
#include "qk/base/error.h"
#include "qk/base/host_info.h"
#include "qk/qccl/tune.h"

namespace qccl {

namespace {

QK_ENV_DOUBLE(env_spin_us, "QCCL_SPIN_US", -1.0,
              "Microseconds a waiting rank polls before it yields its core (-1: the measured cost "
              "of one sched_yield).");
QK_ENV_INT(env_cma_min, "QCCL_CMA_MIN_BYTES", -1,
           "Messages at least this large use single-copy CMA on shared memory (-1: where the "
           "measured single-copy figures beat the shared-memory ring's).");
QK_ENV_INT(env_register_min, "QCCL_REGISTER_MIN_BYTES", -1,
           "Smallest all-reduce (bytes) whose plain buffers are registered for direct access (-1: where "
           "checking a registration costs at most 5% of the call by the cost model).");
QK_ENV_INT(env_direct_min, "QCCL_DIRECT_MIN_BYTES", -1,
           "Smallest all-reduce (bytes) that checks for shared buffers (-1: where the check costs "
           "at most 5% of the call by the cost model; QCCL_ALGO=direct: any size).");

QK_ENV_STRING(env_tune_file, "QCCL_TUNE_FILE", "",
              "A tuning file written by `qk perf --tune` (qk/qccl/tune.h): the shared-memory slice, the "
              "reduction slice, the chain chunk and the single-copy piece measured on this machine.");
QK_ENV_INT(env_shm_slice, "QCCL_SHM_SLICE_BYTES", -1,
           "A shared-memory sender publishes at least every this many bytes (-1: QCCL_TUNE_FILE, else 64 KiB).");
QK_ENV_INT(env_reduce_slice, "QCCL_REDUCE_SLICE_BYTES", -1,
           "A receive-and-reduce consumes this many bytes at a time (-1: QCCL_TUNE_FILE, else 64 KiB).");
QK_ENV_INT(env_chain_chunk, "QCCL_CHAIN_CHUNK_BYTES", -1,
           "The pipelined chain's chunk, broadcast and reduce (-1: QCCL_TUNE_FILE, else 256 KiB; the "
           "largest over the ranks is used).");
QK_ENV_INT(env_cma_copy_chunk, "QCCL_CMA_COPY_CHUNK_BYTES", -1,
           "A single-copy receive moves this many bytes per progress step (-1: QCCL_TUNE_FILE, else 4 MiB).");

// Spinning longer than this never pays, whatever a yield costs (a yield
// that costs more is the scheduler running someone else).
constexpr double kMaxSpinNs = 20000;

size_t sysconf_bytes(int name) {
  long v = ::sysconf(name);
  return v > 0 ? static_cast<size_t>(v) : 0;
}

size_t pow2_floor(size_t v) {
  size_t p = 1;
  while (p * 2 <= v) p *= 2;
  return p;
}

std::string bytes_str(size_t b) {
  if (b == SIZE_MAX) return "never";
  if (b >= (1 << 20) && b % (1 << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

}  // namespace

CacheSizes cache_sizes() {
  // sysfs first: what the kernel read from the CPU. glibc's sysconf decodes
  // cpuid itself and can be far off in a VM (an EPYC guest with a 32 MiB L3:
  // _SC_LEVEL3_CACHE_SIZE said 320 MiB).
  CacheSizes c;
  int llc_level = 0;
  for (int i = 0; i < 8; ++i) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level(dir + "level"), type(dir + "type"), size(dir + "size");
    int lv = 0;
    std::string ty, sz;
    if (!(level >> lv) || !(type >> ty) || !(size >> sz) || sz.empty()) break;
    size_t bytes = std::strtoull(sz.c_str(), nullptr, 10);
    if (sz.back() == 'K') bytes <<= 10;
    else if (sz.back() == 'M') bytes <<= 20;
    if (lv == 1 && ty == "Data") c.l1d = bytes;
    if (lv == 2 && ty == "Unified") c.l2 = bytes;
    if (lv >= 2 && ty == "Unified" && lv >= llc_level) {
      llc_level = lv;
      c.llc = bytes;
    }
  }
#ifdef _SC_LEVEL1_DCACHE_SIZE
  if (c.l1d == 0) c.l1d = sysconf_bytes(_SC_LEVEL1_DCACHE_SIZE);
  if (c.l2 == 0) c.l2 = sysconf_bytes(_SC_LEVEL2_CACHE_SIZE);
  if (c.llc == 0) c.llc = sysconf_bytes(_SC_LEVEL3_CACHE_SIZE);
#endif
  if (c.llc == 0) c.llc = c.l2;
  return c;
}

double measure_yield_ns() {
  using Clock = std::chrono::steady_clock;
  constexpr int kBatches = 8, kPerBatch = 16;
  std::vector<double> ns;
  for (int b = 0; b < kBatches; ++b) {
    auto t = Clock::now();
    for (int i = 0; i < kPerBatch; ++i) ::sched_yield();
    ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t).count() / kPerBatch);
  }
  // Another process that takes the core during a batch only adds: the lower quartile.
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 4];
}

double measure_validate_ns() {
  constexpr double kUncheckable = 1e12;
  // A one-page memfd mapping checked the way registry.cc checks one.
  int fd = ::memfd_create("qccl-probe", MFD_CLOEXEC);
  if (fd < 0) return kUncheckable;
  void* p = ::ftruncate(fd, 4096) == 0 ? ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (p == MAP_FAILED) return kUncheckable;
  using Clock = std::chrono::steady_clock;
  std::vector<double> ns;
  bool holds = true;
  for (int i = 0; i < 9; ++i) {
    auto t = Clock::now();
    holds &= registration_still_holds(p, 4096);
    ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t).count());
  }
  ::munmap(p, 4096);
  // Where /proc/self/map_files cannot be read (some containers) a
  // registration could never be checked: too dear to ever register.
  if (!holds) return kUncheckable;
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2];
}

Tuning machine_tuning(const CacheSizes& caches, int ranks_on_host) {
  Tuning t;
  // Fallbacks where the C library does not know a size: common x86 sizes.
  if (caches.l1d > 0) t.direct_chunk = std::clamp<size_t>(pow2_floor(caches.l1d), 8 << 10, 256 << 10);
  if (caches.l2 > 0) t.cma_chunk = std::clamp<size_t>(pow2_floor(caches.l2 / 8), 32 << 10, 2 << 20);
  if (caches.llc > 0) t.stream_from = std::max<size_t>(64 << 10, caches.llc / (2 * std::max(ranks_on_host, 1)));
  double spin_us = env_spin_us.reload();
  if (spin_us >= 0) {
    t.spin_ns = spin_us * 1e3;
  } else {
    t.yield_ns = measure_yield_ns();
    t.spin_ns = std::min(t.yield_ns, kMaxSpinNs);
  }
  t.validate_ns = measure_validate_ns();
  return t;
}

void apply_tuned_sizes(Tuning& t, int ranks_on_host) {
  qk::qccl::TunedSizes sizes;
  std::string path = env_tune_file.reload();
  if (!path.empty()) {
    // Once per process and path: every communicator would say the same.
    static std::mutex mu;
    static std::map<std::string, std::optional<qk::qccl::TuneFile>> files;
    std::lock_guard<std::mutex> lock(mu);
    auto it = files.find(path);
    if (it == files.end()) {
      std::optional<qk::qccl::TuneFile> f;
      try {
        f = qk::qccl::read_tune_file(path);
        const std::string here = qk::cpu_model_name();
        if (f->cpu != here) {
          QCCL_WARN("INIT", "QCCL_TUNE_FILE {} was measured on '{}', this machine is '{}': left out (run "
                    "`qk perf --tune --out FILE` here)", path, f->cpu, here);
          f.reset();
        } else if (f->entries.empty()) {
          QCCL_WARN("INIT", "QCCL_TUNE_FILE {} has no entries: left out", path);
          f.reset();
        }
      } catch (const qk::Error& e) {
        QCCL_WARN("INIT", "QCCL_TUNE_FILE left out, defaults used: {} (write one with `qk perf --tune --out {}`)",
                  e.message(), path);
      }
      it = files.emplace(path, std::move(f)).first;
    }
    if (it->second) {
      const qk::qccl::TuneEntry* e = qk::qccl::nearest_entry(*it->second, ranks_on_host);
      sizes = e->sizes;
      t.sizes_from = fmt::format("{} (its entry for {} ranks on the host)", path, e->ranks_on_host);
    }
  }
  struct Override {
    const qk::env::Var<int64_t>& var;
    const char* knob;
    size_t* out;
    size_t from_file;
  };
  const Override overrides[] = {{env_shm_slice, "shm_slice", &t.shm_slice, sizes.shm_slice},
                                {env_reduce_slice, "reduce_slice", &t.reduce_slice, sizes.reduce_slice},
                                {env_chain_chunk, "chain_chunk", &t.chain_chunk, sizes.chain_chunk},
                                {env_cma_copy_chunk, "cma_copy_chunk", &t.cma_copy_chunk, sizes.cma_copy_chunk}};
  bool from_env = false;
  for (const Override& o : overrides) {
    *o.out = o.from_file;
    int64_t v = o.var.reload();
    if (v < 0) continue;
    qk::qccl::SizeBounds b = qk::qccl::tune_bounds(o.knob);
    QK_CHECK(static_cast<uint64_t>(v) >= b.lo && static_cast<uint64_t>(v) <= b.hi, o.var.name(), "=", v,
             ": expected a size in [", b.lo, ", ", b.hi, "] bytes, or -1 for the tuned value");
    *o.out = static_cast<size_t>(v);
    from_env = true;
  }
  if (from_env) t.sizes_from += " and QCCL_*_BYTES";
}

void derive_register_min(Tuning& t, const CostModel& m, int nranks);

void derive_thresholds(Tuning& t, const CostModel& m, int nranks, bool oversubscribed, size_t ring_bytes) {
  int64_t cma_env = env_cma_min.reload();
  if (cma_env >= 0) {
    t.cma_min_bytes = static_cast<size_t>(cma_env);
  } else {
    // Single copy pays the kernel's page pinning on every call; the rings pay
    // a second copy, which is cheap while the buffers stay in the last-level
    // cache (cache to cache) and costs a trip through memory once they do
    // not. So: from where the host's ranks' send and receive buffers (2 S per
    // rank) outgrow the LLC. 2 ranks on the 2-core EPYC VM (32 MiB L3),
    // all-reduce medians of 3: 1 MiB 0.09 ms through the rings against 0.15
    // single copy, 4 MiB 0.45 against 0.58, 16 MiB 4.6 against 3.7.
    t.cma_min_bytes = m.llc_bytes > 0 ? m.llc_bytes / (2 * std::max(m.host_ranks, 1)) : 2 * t.cma_chunk;
    // With more ranks than cores a message that fits in the ring lets the
    // sender go on while the receiver waits for a core; a single-copy one
    // keeps the sender until the receiver has run (4 ranks on 2 cores, 1 MiB
    // all-reduce: 0.42 ms through the rings, 1.65 ms single copy from 256 KiB).
    if (oversubscribed) t.cma_min_bytes = std::max(t.cma_min_bytes, ring_bytes + 1);
  }
  int64_t direct_env = env_direct_min.reload();
  if (direct_env >= 0) {
    t.direct_min_bytes = static_cast<size_t>(direct_env);
  } else {
    // Where buffers turn out not to be shared, the descriptor exchange was
    // spent for nothing: take it from where it is at most 5% of the call.
    double exchange = m.alpha_us * (1 + 0.25 * (std::max(nranks, 2) - 2));
    t.direct_min_bytes = size_t(1) << 30;
    for (size_t b = 1024; b <= (size_t(1) << 30); b *= 2) {
      Algo a = choose(m, "auto", Coll::kAllReduce, std::max(nranks, 2), b);
      if (a == Algo::kDirect || exchange <= 0.05 * predict_us(m, Coll::kAllReduce, a, std::max(nranks, 2), b)) {
        t.direct_min_bytes = b;
        break;
      }
    }
  }
  derive_register_min(t, m, nranks);
}

void derive_register_min(Tuning& t, const CostModel& m, int nranks) {
  int64_t env = env_register_min.reload();
  if (env >= 0) {
    t.register_min_bytes = static_cast<size_t>(env);
    return;
  }
  if (t.validate_ns >= 1e12) {  // measure_validate_ns: registrations cannot be checked here
    t.register_min_bytes = SIZE_MAX;
    return;
  }
  // A call checks its two buffers' registrations.
  double check_us = 2 * t.validate_ns / 1e3;
  t.register_min_bytes = size_t(1) << 30;
  for (size_t b = 4096; b <= (size_t(1) << 30); b *= 2) {
    Algo a = choose(m, "auto", Coll::kAllReduce, std::max(nranks, 2), b);
    if (check_us <= 0.05 * predict_us(m, Coll::kAllReduce, a, std::max(nranks, 2), b)) {
      t.register_min_bytes = b;
      break;
    }
  }
}

std::string Tuning::describe() const {
  return fmt::format(
      "spin {:.0f} ns{}, single copy from {} in {} pieces, shared-buffer check from {}, plain buffers "
      "registered from {} (a check costs {:.1f} us), direct chunk {}, streaming stores from {}; shm slice {}, "
      "reduce slice {}, chain chunk {}, single-copy receive piece {} (from {})",
      spin_ns, yield_ns > 0 ? fmt::format(" (a yield costs {:.0f} ns)", yield_ns) : std::string(),
      bytes_str(cma_min_bytes), bytes_str(cma_chunk), bytes_str(direct_min_bytes), bytes_str(register_min_bytes),
      validate_ns / 1e3, bytes_str(direct_chunk), bytes_str(stream_from), bytes_str(shm_slice),
      bytes_str(reduce_slice), bytes_str(chain_chunk), bytes_str(cma_copy_chunk), sizes_from);
}

}  // namespace qccl
