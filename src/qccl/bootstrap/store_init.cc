// Creating a communicator through the rendezvous store: rank 0 makes the
// unique id, the store carries it to the others.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bootstrap/bootstrap.h"
#include "qk/base/error.h"
#include "qk/qccl/store.h"

namespace qk::qccl {

std::string random_store_token() {
  std::string hex;
  for (uint8_t b : ::qccl::random_token()) hex += fmt::format("{:02x}", b);
  return hex;
}

qcclUniqueId exchange_unique_id(Store& store, int nranks, int rank, const std::string& prefix,
                                double timeout_s) {
  QK_CHECK(nranks >= 1 && rank >= 0 && rank < nranks, "init_from_store: expected 0 <= rank < nranks, got rank ",
           rank, " of ", nranks);
  if (timeout_s < 0) timeout_s = store.timeout_s();
  char host[64] = {0};
  ::gethostname(host, sizeof host - 1);
  store.set(prefix + "/arrived/" + std::to_string(rank), std::string(host) + " pid " + std::to_string(::getpid()));
  if (rank == 0) {
    qcclUniqueId id;
    QK_CHECK_AS(IoError, qcclGetUniqueId(&id) == qcclSuccess, "init_from_store: qcclGetUniqueId: ",
                qcclGetLastError(nullptr));
    store.set(prefix + "/id", std::string(id.internal, sizeof id.internal));
  }
  // Everyone waits for everyone, so a rank that never comes is named on every
  // rank rather than surfacing later as a bootstrap timeout.
  std::vector<std::string> keys;
  for (int r = 0; r < nranks; ++r) keys.push_back(prefix + "/arrived/" + std::to_string(r));
  keys.push_back(prefix + "/id");
  try {
    store.wait(keys, timeout_s);
  } catch (const TimeoutError& e) {
    std::string ranks;
    for (const auto& k : missing_keys_of(e.message())) {
      auto slash = k.rfind('/');
      if (k.compare(0, prefix.size() + 9, prefix + "/arrived/") == 0)
        ranks += (ranks.empty() ? "" : ", ") + k.substr(slash + 1);
    }
    QK_THROW(TimeoutError, "rendezvous '", prefix, "' at store ", store.address(), ": rank ", rank, " of ",
             nranks, " waited ", timeout_s, " s but ",
             ranks.empty() ? std::string("rank 0 never published the unique id")
                           : "rank(s) " + ranks + " never arrived",
             " (did they start? do they use the same WORLD_SIZE and store?)");
  }
  std::string bytes = store.get(prefix + "/id", timeout_s);
  QK_CHECK_AS(IoError, bytes.size() == sizeof(qcclUniqueId::internal), "init_from_store: key '", prefix,
              "/id' holds ", bytes.size(), " bytes, not a qcclUniqueId (", sizeof(qcclUniqueId::internal),
              "); two jobs sharing one store and prefix?");
  qcclUniqueId id;
  std::memcpy(id.internal, bytes.data(), bytes.size());
  return id;
}

std::unique_ptr<Communicator> init_from_store(Store& store, int nranks, int rank, const CommOptions& opts,
                                              const std::string& prefix) {
  qcclUniqueId id = exchange_unique_id(store, nranks, rank, prefix, opts.timeout_s > 0 ? opts.timeout_s : -1);
  return Communicator::init(nranks, id, rank, opts);
}

}  // namespace qk::qccl
