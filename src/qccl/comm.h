// The communicator: who the ranks are, one connection per peer, sequence
// numbers that keep every rank's messages matched, the flight recorder, and
// the abort/error state that makes every later call fail fast.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "qccl.h"
#include "algo/cost_model.h"
#include "algo/tuning.h"
#include "bootstrap/bootstrap.h"
#include "flight_recorder.h"
#include "transport/conn.h"
#include "transport/shared_mem.h"

namespace qccl {
class Backend;  // qccl/backend/backend.h
namespace topo {
struct CommTopo;  // qccl/topo/comm_topo.h
}
}

struct qcclComm {
  static constexpr uint64_t kMagic = 0x514343434f4d4d31ull;  // "QCCCOMM1"
  uint64_t magic = kMagic;

  int rank = 0;
  int nranks = 1;
  std::string name = "qccl";
  double timeout_s = 300;
  qccl::Token token{};
  std::vector<qccl::PeerInfo> peers;
  std::vector<std::unique_ptr<qccl::Conn>> conns;  // [rank]; null for self
  qccl::CostModel cost;
  std::string algo = "auto";
  // The last choice per collective (cost and algo are set during init, before
  // any collective, and a training loop repeats its sizes): choose() costs ~5%
  // of an 8-byte call.
  struct AlgoChoice {
    size_t bytes = SIZE_MAX;
    qccl::Algo algo = qccl::Algo::kRing;
  };
  AlgoChoice last_choice[qccl::kNumColls];
  std::shared_ptr<const qccl::topo::CommTopo> topo;  // hosts, rings, hierarchical plan
  qccl::Tuning tuning;  // machine-derived knobs (algo/tuning.h), set at init
  // More ranks on this host than CPUs: the peer we wait for may need our core,
  // so waits yield at once, and the cost probe's shared-memory timings (which
  // measure the scheduler then, not the link) give way to the static figures.
  bool oversubscribed = false;

  uint64_t coll_seq = 0;                 // collectives started, same on every rank
  std::vector<uint32_t> p2p_send_seq;    // messages sent to / received from each peer
  std::vector<uint32_t> p2p_recv_seq;
  // Messages completed to / from each peer, every kind counted (debug
  // counters: the tests read them to see which neighbours an algorithm used).
  std::vector<uint64_t> msgs_sent, msgs_received;
  // Payload bytes moved to / from peers, every call counted (headers not):
  // qcclCommGetTraffic. Atomic so any thread may read them mid-call.
  std::atomic<uint64_t> bytes_sent{0}, bytes_received{0};
  std::atomic<uint64_t> messages_sent{0}, messages_received{0};
  qccl::FlightRecorder fr;
  std::vector<char> scratch;  // temporaries of the algorithms, reused
  qccl::PeerMappings peer_maps;  // peers' qcclMemAlloc buffers mapped here (algo/direct.h)
  uint64_t direct_calls = 0;     // all-reduces that went direct (tests read it)
  uint64_t direct_cma_calls = 0;  // of those, the ones that reached some peer by single copy

  std::atomic<bool> aborted{false};
  std::atomic<int> active_calls{0};
  std::mutex err_mu;
  qcclResult_t async_error = qcclSuccess;  // written under err_mu
  std::atomic<bool> broken{false};         // async_error is set (read without the lock)
  std::string async_msg;

  // The engine of this communicator's calls (qccl/backend/backend.h); declared
  // last so it goes before the connections it may use.
  std::unique_ptr<qccl::Backend> backend;
  bool (*backend_owns)(const void*) = nullptr;    // when `backend` carries device memory
  std::unique_ptr<qccl::Backend> host_backend;    // then: the native engine, for host memory
  std::unique_ptr<qccl::Backend> device_backend;  // made on the first device-memory call
  const char* device_kind = nullptr;              // its name, under QCCL_BACKEND=auto
  bool (*device_owns)(const void*) = nullptr;
  std::unique_ptr<qccl::Backend> (*device_make)(qcclComm&) = nullptr;

  explicit qcclComm(int fr_entries);
  ~qcclComm();
  // Marks the communicator broken and closes every connection so that peers
  // blocked on us fail now instead of at their deadline.
  void fail(qcclResult_t code, const std::string& msg);
  // Throws when the communicator was aborted or broken by an earlier error.
  void check_usable() const;
  // "rank 3 (pid 1234 on host)"
  std::string peer_name(int r) const;
};

namespace qccl {
// Counts a call in progress so qcclCommAbort can wait for it to leave.
class ActiveCall {
 public:
  explicit ActiveCall(qcclComm* c) : c_(c) { c_->active_calls.fetch_add(1); }
  ~ActiveCall() { c_->active_calls.fetch_sub(1); }
  ActiveCall(const ActiveCall&) = delete;
  ActiveCall& operator=(const ActiveCall&) = delete;

 private:
  qcclComm* c_;
};
}  // namespace qccl
