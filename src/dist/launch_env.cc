#include "qk/dist/launch_env.h"

#include <memory>
#include <mutex>
#include <optional>

#include "qk/base/env.h"
#include "qk/base/error.h"
#include "qk/qccl/store.h"

namespace qk::dist {
namespace {

std::optional<int> get_int(const char* name) {
  auto v = env::get_raw(name);
  if (!v || v->empty()) return std::nullopt;
  return static_cast<int>(env::parse_int(name, *v));
}

// Rank, size and local rank under one launcher's names; false if its rank is not set.
bool read_triple(LaunchEnv& e, const char* rank, const char* size, const char* local, const char* src) {
  auto r = get_int(rank);
  if (!r) return false;
  auto s = get_int(size);
  QK_CHECK(s.has_value(), rank, " is set (", *r, ") but ", size, " is not; the launcher set only half "
           "of its variables");
  QK_CHECK(*s >= 1 && *r >= 0 && *r < *s, "Expected 0 <= ", rank, " < ", size, ", got ", *r, " and ", *s);
  e.rank = *r;
  e.world_size = *s;
  if (local) {
    if (auto l = get_int(local)) e.local_rank = *l;
  }
  e.source = src;
  return true;
}

}  // namespace

LaunchEnv launch_env() {
  LaunchEnv e;
  e.source = "none";
  if (!read_triple(e, "RANK", "WORLD_SIZE", "LOCAL_RANK", "RANK") &&
      !read_triple(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI") &&
      !read_triple(e, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "PMI") &&
      !read_triple(e, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM")) {
    e.rank = 0;
    e.world_size = 1;
  }
  e.local_world_size = e.world_size;
  for (const char* n : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
    if (auto v = get_int(n)) {
      e.local_world_size = *v;
      break;
    }
  if (auto a = env::get_raw("MASTER_ADDR")) e.master_addr = *a;
  if (auto p = get_int("MASTER_PORT")) {
    QK_CHECK(*p > 0 && *p < 65536, "MASTER_PORT: expected a port in 1..65535, got ", *p);
    e.master_port = *p;
  }
  if (auto t = env::get_raw("QK_STORE_TOKEN")) e.store_token = *t;
  if (auto q = env::get_raw("QK_RUN")) e.under_qk_run = *q == "1";
  if (auto c = get_int("QK_RESTART_COUNT")) e.restart_count = *c;
  if (e.under_qk_run) e.source = "qk run";
  return e;
}

qcclUniqueId rendezvous_unique_id(const LaunchEnv& e, const std::string& prefix, double timeout_s) {
  QK_CHECK(!e.master_addr.empty() && e.master_port > 0, "rendezvous: rank ", e.rank, " of ", e.world_size,
           " needs MASTER_ADDR and MASTER_PORT (or start the job with `qk run`)");
  static std::mutex mu;
  static std::unique_ptr<qk::qccl::StoreServer> server;  // rank 0 without qk run: lives with the process
  {
    std::lock_guard<std::mutex> g(mu);
    if (!e.under_qk_run && e.rank == 0 && !server)
      server = std::make_unique<qk::qccl::StoreServer>(static_cast<uint16_t>(e.master_port), e.store_token);
  }
  try {
    qk::qccl::Store store(e.master_addr, static_cast<uint16_t>(e.master_port), e.store_token, timeout_s);
    return qk::qccl::exchange_unique_id(store, e.world_size, e.rank, prefix, timeout_s);
  } catch (const std::exception&) {
    if (server) server->drain(timeout_s);  // let the others hear why, not a closed socket
    throw;
  }
}

}  // namespace qk::dist
