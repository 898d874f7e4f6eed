#include "qk/dist/launch_env.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "qk/base/error.h"
#include "qk/base/launch_vars.h"
#include "qk/qccl/store.h"

namespace qk::dist {
namespace {

using IntVar = env::Var<int64_t>;

std::optional<int> get_int(const IntVar& v) {
  auto x = v.lookup();
  if (!x) return std::nullopt;
  QK_CHECK(*x >= INT32_MIN && *x <= INT32_MAX, v.name(), "=", *x, " is out of range");
  return static_cast<int>(*x);
}

// Rank, size and local rank (null: the launcher sets none) under one
// launcher's names; false if its rank is not set.
bool read_triple(LaunchEnv& e, const IntVar& rank, const IntVar& size, const IntVar* local, const char* src) {
  auto r = get_int(rank);
  if (!r) return false;
  auto s = get_int(size);
  QK_CHECK(s.has_value(), rank.name(), " is set (", *r, ") but ", size.name(),
           " is not; the launcher set only half of its variables");
  QK_CHECK(*s >= 1 && *r >= 0 && *r < *s, "Expected 0 <= ", rank.name(), " < ", size.name(), ", got ", *r,
           " and ", *s);
  e.rank = *r;
  e.world_size = *s;
  if (local)
    if (auto l = get_int(*local)) e.local_rank = *l;
  e.source = src;
  return true;
}

}  // namespace

LaunchEnv launch_env() {
  namespace v = env::launch;
  LaunchEnv e;
  e.source = "none";
  if (!read_triple(e, v::rank, v::world_size, &v::local_rank, "RANK") &&
      !read_triple(e, v::ompi_rank, v::ompi_size, &v::ompi_local_rank, "OMPI") &&
      !read_triple(e, v::qk_rank, v::qk_world_size, nullptr, "QK_RANK") &&
      !read_triple(e, v::pmi_rank, v::pmi_size, &v::pmi_local_rank, "PMI") &&
      !read_triple(e, v::slurm_rank, v::slurm_size, &v::slurm_local_rank, "SLURM")) {
    e.rank = 0;
    e.world_size = 1;
  }
  e.local_world_size = e.world_size;
  for (const IntVar* n : {&v::local_world_size, &v::ompi_local_size, &v::pmi_local_size})
    if (auto x = get_int(*n)) {
      e.local_world_size = *x;
      break;
    }
  if (auto a = v::master_addr.lookup()) e.master_addr = *a;
  if (auto p = get_int(v::master_port)) {
    QK_CHECK(*p > 0 && *p < 65536, "MASTER_PORT: expected a port in 1..65535, got ", *p);
    e.master_port = *p;
  }
  if (auto t = v::store_token.lookup()) e.store_token = *t;
  if (auto q = v::run.lookup()) e.under_qk_run = *q == "1";
  if (auto c = get_int(v::restart_count)) e.restart_count = *c;
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
