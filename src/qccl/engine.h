// The engine: drives a set of transfers (send, receive, receive-and-reduce)
// to completion together, so a ring step sends to the next rank while it
// receives from the previous one. Algorithms describe steps as Xfers and
// never touch a transport.
//
//   Call call(comm, "allreduce", MsgKind::kAllReduce, bytes, algo);
//   Xfer xs[2] = {Xfer::send(next, src, n), Xfer::recv_reduce(prev, dst, local, n, true)};
//   run(call, xs);
//
// Every message carries a 16-byte header (magic, version, kind, sequence
// number, size) that the receiver checks before trusting the payload, so
// ranks that call different collectives or counts get an error naming the
// peer instead of silently wrong data. Every wait is bounded by the call's
// deadline and watches the communicator's abort flag.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "comm.h"
#include "core/errors.h"
#include "core/reduce.h"

namespace qccl {

// Which operation a message belongs to; carried in every header so ranks that
// call different operations are told so.
// kP2P and kProbe (the cost model's ping-pong at set-up) carry per-peer
// sequence numbers set by the caller; the collectives use the comm's count.
// New kinds go last: the numbers are on the wire.
enum class MsgKind : uint8_t {
  kP2P = 1, kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll, kProbe,
  kAllToAllv
};
constexpr MsgKind kLastMsgKind = MsgKind::kAllToAllv;
inline bool per_peer_seq(MsgKind k) { return k == MsgKind::kP2P || k == MsgKind::kProbe; }
const char* msg_kind_name(MsgKind k);

struct MsgHeader {
  uint32_t magic;  // kMsgMagic | kind << 8 | version
  uint32_t seq;
  uint64_t bytes;
};
static_assert(sizeof(MsgHeader) == 16);

// One collective or point-to-point call in progress.
struct Call {
  Call(qcclComm& c, const char* what, MsgKind kind, size_t bytes, const char* algo, int peer = -1);
  ~Call();  // marks the flight-recorder entry failed unless finish() was called
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;
  qcclComm& comm;
  const char* what;
  MsgKind kind;
  uint64_t seq;
  // Armed at the first wait, not at construction: reading the clock costs
  // ~50 ns on this VM, a tenth of a small all-reduce, and a call that never
  // waits cannot hang.
  const Deadline& deadline() {
    if (!deadline_) deadline_.emplace(timeout_s);
    return *deadline_;
  }
  size_t fr_slot;
  qcclDataType_t dtype = qcclUint8;
  qcclRedOp_t op = qcclSum;
  bool finished = false;

 private:
  double timeout_s;
  std::optional<Deadline> deadline_;
};

struct Xfer {
  enum Kind : uint8_t { kSend, kRecv, kRecvReduce };
  Kind kind = kSend;
  int peer = -1;
  const void* src = nullptr;    // kSend
  void* dst = nullptr;          // kRecv, kRecvReduce
  const void* local = nullptr;  // kRecvReduce: the other operand
  size_t bytes = 0;
  bool received_first = false;  // kRecvReduce: op(received, local) instead of op(local, received)
  uint32_t seq = 0;             // set by run() for collectives; by the caller for p2p

  static Xfer send(int peer, const void* src, size_t bytes);
  static Xfer recv(int peer, void* dst, size_t bytes);
  // dst = op(local, received) (or op(received, local)); dst may equal local.
  static Xfer recv_reduce(int peer, void* dst, const void* local, size_t bytes, bool received_first);

  // Progress state (engine-private).
  struct CmaDesc {
    uint64_t addr;
    uint64_t pid;
  };
  bool cma = false;         // single copy: the receiver reads our buffer (see conn.h)
  size_t desc_done = 0;
  CmaDesc desc{};
  uint64_t cma_target = 0;  // sender: done when the peer has acked this many buffers
  MsgHeader hdr{};
  size_t hdr_done = 0;
  size_t done = 0;
  size_t partial = 0;  // bytes of a split element gathered in elem[]
  alignas(8) unsigned char elem[8];
};

// Runs all transfers to completion. Throws RemoteError (peer failed, closed or
// sent a bad message), TimeoutError (deadline; the flight recorder is dumped)
// or UsageError (the communicator was aborted).
void run(Call& call, std::span<Xfer> xs);

// Waits until ready() holds, with run()'s waiting policy, deadline, abort
// check and liveness checks of `peers`; `what` names the wait in a timeout.
void wait_until(Call& call, const std::function<bool()>& ready, std::span<const int> peers, const char* what);

// Marks the call done in the flight recorder (call on success).
void finish(Call& call);

}  // namespace qccl
