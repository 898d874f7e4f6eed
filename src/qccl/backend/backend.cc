// Choosing a communicator's backend (QCCL_BACKEND) and the registry of the
// backends other libraries add.
#include "backend/backend.h"

#include <mutex>
#include <string>
#include <vector>

#include "comm.h"
#include "core/debug.h"
#include "core/errors.h"
#include "qk/base/env.h"

#ifdef QK_HAVE_MPI
#include "backend/mpi.h"
#endif

namespace qccl {

namespace {

QK_ENV_STRING(env_backend, "QCCL_BACKEND", "auto",
              "Engine of every collective: auto (native; device memory through NCCL when linked), "
              "native, mpi (Open MPI, under mpirun) or nccl.");

std::mutex g_mu;
std::vector<BackendKind>& kinds() {
  static std::vector<BackendKind> k;
  return k;
}

// Built-in kinds first; registered ones (nccl) after.
std::vector<BackendKind> all_kinds() {
  std::vector<BackendKind> out = {{"native", make_native_backend, nullptr}};
#ifdef QK_HAVE_MPI
  out.push_back({"mpi", make_mpi_backend, nullptr});
#endif
  std::lock_guard<std::mutex> g(g_mu);
  out.insert(out.end(), kinds().begin(), kinds().end());
  return out;
}

std::string known_names(const std::vector<BackendKind>& ks) {
  std::string s = "auto";
  for (auto& k : ks) s += std::string(", ") + k.name;
  return s;
}

}  // namespace

void register_backend(const BackendKind& kind) {
  std::lock_guard<std::mutex> g(g_mu);
  kinds().push_back(kind);
}

void attach_backend(qcclComm& c) {
  std::string want = env_backend.reload();  // per communicator: tests switch it
  auto ks = all_kinds();
  const BackendKind* kind = nullptr;
  for (auto& k : ks)
    if (want == k.name || (want == "auto" && std::string(k.name) == "native")) kind = &k;
  if (!kind) {
    std::string hint = want == "mpi"    ? " (this build has no MPI: install libopenmpi-dev and reconfigure)"
                       : want == "nccl" ? " (link qianka::qccl_nccl; it is built when CUDA and NCCL are found)"
                                        : "";
    QK_THROW(qk::ValueError, "QCCL_BACKEND: expected one of ", known_names(ks), ", got '", want, "'",
             hint);
  }
  c.backend = kind->make(c);
  c.backend_owns = kind->owns_pointer;
  // A device backend cannot read host memory: host buffers keep the native
  // engine (torch's "cpu:gloo,cuda:nccl"), so a job's small host collectives
  // (metrics, barriers, checkpoint agreement) work under QCCL_BACKEND=nccl.
  if (kind->owns_pointer) c.host_backend = make_native_backend(c);
  QCCL_INFO("INIT", "comm '{}' rank {}: collectives run on the {} backend", c.name, c.rank,
            c.backend->name());
  if (want != "auto") return;
  for (auto& k : ks)
    if (k.owns_pointer) {
      c.device_kind = k.name;
      c.device_owns = k.owns_pointer;
      c.device_make = k.make;
      break;
    }
}

void check_all_to_all_v_counts(const qcclComm& c, std::span<const uint64_t> all, size_t stride) {
  const size_t n = static_cast<size_t>(c.nranks);
  QK_INTERNAL_ASSERT(stride >= 2 * n && all.size() == stride * n, "bad count table");
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      const uint64_t sends = all[i * stride + j], expects = all[j * stride + n + i];
      if (sends != expects)
        QK_THROW(RemoteError, "qcclAllToAllv on comm '", c.name, "': ", c.peer_name(static_cast<int>(i)),
                 " sends ", sends, " elements to ", c.peer_name(static_cast<int>(j)), ", which expects ",
                 expects, " (its recvcounts[", i, "]): ranks passed different counts");
    }
}

Backend& backend_for(qcclComm& c, const void* a, const void* b) {
  if (c.host_backend && !((a && c.backend_owns(a)) || (b && c.backend_owns(b)))) return *c.host_backend;
  if (!c.device_owns || !((a && c.device_owns(a)) || (b && c.device_owns(b)))) return *c.backend;
  if (!c.device_backend) {
    QCCL_INFO("INIT", "comm '{}' rank {}: device buffers: starting the {} backend", c.name, c.rank,
              c.device_kind);
    c.device_backend = c.device_make(c);
  }
  return *c.device_backend;
}

}  // namespace qccl
