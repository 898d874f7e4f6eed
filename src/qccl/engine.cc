#include "engine.h"

#include <poll.h>
#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include "core/debug.h"
#include "transport/cma.h"

namespace qccl {

namespace {

constexpr uint32_t kMsgMagic = 0x51430000u;  // "QC" in the high half
constexpr uint32_t kMsgVersion = 1;
constexpr uint32_t kCmaFlag = 0x8000u;       // in the kind byte: a CMA descriptor follows

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// How a wait that found nothing to do goes on, for the transfers' loop and
// for wait_until alike. Poll for as long as one yield costs
// (Tuning::spin_ns, measured at init: spinning longer than the alternative
// costs can at most double a wait), then yield, and sleep briefly once the
// wait is long (a slow peer, not a busy link). The spin is timed by the
// clock, read every 8 polls, not by a poll count: how long a pause takes
// depends on the CPU (21 ns on the Intel VM the old count was tuned on, 27
// on the EPYC VM), so a count tuned on one machine spins another length on
// the next. With more ranks than cores the peer we wait for may
// need our core: yield at once (4 ranks on 2 cores: an 8-byte all-reduce
// took 45 us with 128 polls, 16 us without).
class IdleWait {
 public:
  using Clock = Deadline::Clock;
  explicit IdleWait(const qcclComm& comm)
      : spin_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::nano>(comm.tuning.spin_ns))),
        spins_(comm.tuning.spin_ns > 0 && !comm.oversubscribed),
        spin_left_(spins_) {}
  // Something moved: the next idle round starts a fresh spin.
  void moved() {
    idle_ = 0;
    idle_start_ = {};
    spin_left_ = spins_;
  }
  // One idle round: true while the spin lasts (poll again at once).
  bool spinning() {
    ++idle_;
    if (!spin_left_) return false;
    if (idle_ == 1) spin_start_ = Clock::now();
    if ((idle_ & 7) != 0 || Clock::now() - spin_start_ < spin_) {
      cpu_relax();
      return true;
    }
    spin_left_ = false;
    return false;
  }
  // Past the spin: the time, the wait's start marked on the first call.
  Clock::time_point now() {
    auto t = Clock::now();
    if (idle_start_ == Clock::time_point{}) idle_start_ = t;
    if (last_alive_ == Clock::time_point{}) last_alive_ = t;
    return t;
  }
  // Every 5 ms of waiting: time to ask whether the peers are alive.
  bool peers_due(Clock::time_point t) {
    if (t - last_alive_ <= std::chrono::milliseconds(5)) return false;
    last_alive_ = t;
    return true;
  }
  // Yield for the first 20 ms of a wait, then sleep 50 us at a time.
  void yield_or_sleep(Clock::time_point t) const {
    if (t - idle_start_ < std::chrono::milliseconds(20)) {
      sched_yield();
    } else {
      timespec ts{0, 50000};
      nanosleep(&ts, nullptr);
    }
  }

 private:
  Clock::duration spin_;
  bool spins_, spin_left_;
  uint64_t idle_ = 0;
  Clock::time_point spin_start_{}, idle_start_{}, last_alive_{};
};

uint32_t magic_for(MsgKind k) { return kMsgMagic | (uint32_t(k) << 8) | kMsgVersion; }

const char* kind_word(uint32_t magic) {
  uint32_t k = (magic >> 8) & 0xff;
  if (k < uint32_t(MsgKind::kP2P) || k > uint32_t(kLastMsgKind)) return "an unknown operation";
  return msg_kind_name(static_cast<MsgKind>(k));
}

void check_header(const Call& call, const Conn& c, Xfer& x) {
  MsgHeader h = x.hdr;
  const std::string& who = c.peer_name();
  if ((h.magic & 0xffff0000u) == kMsgMagic && (h.magic & kCmaFlag)) {
    if (!c.cma())
      QCCL_REMOTE_ERROR(who, " offered a single-copy (CMA) transfer on a connection without it");
    x.cma = true;
    h.magic &= ~kCmaFlag;
  }
  if ((h.magic & 0xffff0000u) != kMsgMagic)
    QCCL_REMOTE_ERROR(who, " sent bytes that are not a qccl message (magic 0x", std::hex, h.magic,
                      std::dec, ") during ", call.what, " #", call.seq,
                      "; the connection carries garbage or another program's data");
  if ((h.magic & 0xffu) != kMsgVersion)
    QCCL_REMOTE_ERROR(who, " speaks qccl wire version ", (h.magic & 0xffu), ", this rank ",
                      kMsgVersion, " (mixed qccl builds?)");
  if (h.magic != magic_for(call.kind))
    QCCL_REMOTE_ERROR(who, " is in ", kind_word(h.magic), " while this rank is in ", call.what,
                      " #", call.seq, ": ranks called different operations");
  if (h.seq != x.seq)
    QCCL_REMOTE_ERROR(who, " sent a message of its operation #", h.seq, " while this rank is at #",
                      x.seq, " (", call.what,
                      "): ranks called collectives in different orders or numbers");
  if (h.bytes != x.bytes)
    QCCL_REMOTE_ERROR(who, " sent ", h.bytes, " bytes for ", call.what, " #", call.seq,
                      " where this rank expected ", x.bytes,
                      ": ranks passed different counts, datatypes or roots");
}

// Each step_* returns true when it moved at least one byte.
bool step_send(Call& call, Conn& c, Xfer& x) {
  bool moved = false;
  if (x.hdr_done < sizeof(MsgHeader)) {
    if (x.hdr_done == 0) {
      x.cma = c.cma() && x.bytes >= call.comm.tuning.cma_min_bytes;
      x.hdr = MsgHeader{magic_for(call.kind) | (x.cma ? kCmaFlag : 0), x.seq, x.bytes};
      // getpid() is a system call every time (glibc caches nothing): only for CMA.
      if (x.cma) {
        x.desc = {reinterpret_cast<uint64_t>(x.src), static_cast<uint64_t>(::getpid())};
        advise_huge_pages(x.src, x.bytes);
      }
      if (!x.cma) {
        // Header and data together where the transport can (Conn::try_send2).
        size_t k = c.try_send2(&x.hdr, sizeof(MsgHeader), x.src, x.bytes);
        x.hdr_done = std::min(k, sizeof(MsgHeader));
        x.done = k - x.hdr_done;
        if (x.hdr_done < sizeof(MsgHeader)) return k > 0;
        moved = true;
      }
    }
  }
  if (x.hdr_done < sizeof(MsgHeader)) {
    size_t k = c.try_send(reinterpret_cast<char*>(&x.hdr) + x.hdr_done, sizeof(MsgHeader) - x.hdr_done);
    x.hdr_done += k;
    if (x.hdr_done < sizeof(MsgHeader)) return k > 0;
    moved = true;
  }
  if (x.cma) {
    if (x.desc_done < sizeof x.desc) {
      size_t k = c.try_send(reinterpret_cast<char*>(&x.desc) + x.desc_done, sizeof x.desc - x.desc_done);
      x.desc_done += k;
      moved |= k > 0;
      if (x.desc_done < sizeof x.desc) return moved;
      x.cma_target = ++c.cma_posted;
    }
    // The peer copies straight from our buffer; we are done when it says so.
    if (x.done < x.bytes && c.cma_acks() >= x.cma_target) {
      x.done = x.bytes;
      moved = true;
    }
    return moved;
  }
  while (x.done < x.bytes) {
    size_t k = c.try_send(static_cast<const char*>(x.src) + x.done, x.bytes - x.done);
    if (k == 0) break;
    x.done += k;
    moved = true;
  }
  return moved;
}

bool recv_header(Call& call, Conn& c, Xfer& x, bool* ready) {
  *ready = x.hdr_done == sizeof(MsgHeader);
  if (*ready) return false;
  size_t k = c.try_recv(reinterpret_cast<char*>(&x.hdr) + x.hdr_done, sizeof(MsgHeader) - x.hdr_done);
  x.hdr_done += k;
  if (x.hdr_done == sizeof(MsgHeader)) {
    check_header(call, c, x);
    *ready = true;
  }
  return k > 0;
}

void reduce_into(Call& call, Xfer& x, const void* received, size_t nbytes) {
  size_t es = dtype_size(call.dtype);
  char* dst = static_cast<char*>(x.dst) + x.done;
  const char* local = static_cast<const char*>(x.local) + x.done;
  if (x.received_first)
    reduce(dst, received, local, nbytes / es, call.dtype, call.op);
  else
    reduce(dst, local, received, nbytes / es, call.dtype, call.op);
  x.done += nbytes;
}

// Reads the descriptor of a single-copy transfer; true once it is complete.
bool recv_desc(Conn& c, Xfer& x, bool* moved) {
  if (x.desc_done == sizeof x.desc) return true;
  size_t k = c.try_recv(reinterpret_cast<char*>(&x.desc) + x.desc_done, sizeof x.desc - x.desc_done);
  x.desc_done += k;
  *moved |= k > 0;
  if (x.desc_done < sizeof x.desc) return false;
  if (x.desc.pid != static_cast<uint64_t>(c.peer_pid()))
    QCCL_REMOTE_ERROR(c.peer_name(), " sent a single-copy descriptor for pid ", x.desc.pid,
                      " instead of its own pid ", c.peer_pid());
  return true;
}

// Copies [x.done, x.done + n) of the peer's buffer to dst; returns bytes copied.
size_t cma_read_next(Conn& c, Xfer& x, void* dst, size_t n) {
  cma_read(c, dst, x.desc.addr + x.done, n);
  return n;
}

bool step_recv_cma(Call& call, Conn& c, Xfer& x, bool moved) {
  if (!recv_desc(c, x, &moved)) return moved;
  if (x.done == x.bytes) return moved;
  if (x.kind == Xfer::kRecv) {
    size_t n = std::min(call.comm.tuning.cma_copy_chunk, x.bytes - x.done);  // per step: others keep moving
    x.done += cma_read_next(c, x, static_cast<char*>(x.dst) + x.done, n);
  } else {
    // Pieces that stay in cache between the read and the reduction.
    thread_local std::vector<char> tmp;
    tmp.resize(call.comm.tuning.cma_chunk);
    size_t n = std::min(tmp.size(), x.bytes - x.done);
    n -= n % dtype_size(call.dtype);
    cma_read_next(c, x, tmp.data(), n);
    reduce_into(call, x, tmp.data(), n);
  }
  if (x.done == x.bytes) c.cma_ack();
  return true;
}

bool step_recv(Call& call, Conn& c, Xfer& x) {
  bool ready;
  bool moved = recv_header(call, c, x, &ready);
  if (!ready) return moved;
  if (x.cma) return step_recv_cma(call, c, x, moved);
  while (x.done < x.bytes) {
    size_t k = c.try_recv(static_cast<char*>(x.dst) + x.done, x.bytes - x.done);
    if (k == 0) break;
    x.done += k;
    moved = true;
  }
  return moved;
}

bool step_recv_reduce(Call& call, Conn& c, Xfer& x) {
  bool ready;
  bool moved = recv_header(call, c, x, &ready);
  if (!ready) return moved;
  if (x.cma) return step_recv_cma(call, c, x, moved);
  size_t es = dtype_size(call.dtype);
  while (x.done < x.bytes) {
    const void* p = nullptr;
    size_t avail = c.peek(&p);
    if (avail == 0) break;
    moved = true;
    if (x.partial > 0 || avail < es) {
      // An element split across the ring's wrap point or a short read: gather it.
      size_t k = std::min(es - x.partial, avail);
      std::memcpy(x.elem + x.partial, p, k);
      c.consume(k);
      x.partial += k;
      if (x.partial == es) {
        x.partial = 0;
        reduce_into(call, x, x.elem, es);
      }
      continue;
    }
    size_t m = std::min({avail, x.bytes - x.done, call.comm.tuning.reduce_slice});  // the producer refills behind
    m -= m % es;
    reduce_into(call, x, p, m);
    c.consume(m);
  }
  return moved;
}

std::string pending_list(const Call& call, std::span<Xfer> xs) {
  std::string s;
  for (const Xfer& x : xs) {
    bool complete = x.hdr_done == sizeof(MsgHeader) && x.done == x.bytes;
    if (complete) continue;
    if (!s.empty()) s += ", ";
    s += fmt::format("{} {} ({} of {} bytes)", x.kind == Xfer::kSend ? "sending to" : "receiving from",
                     call.comm.peer_name(x.peer), x.done, x.bytes);
  }
  return s;
}

}  // namespace

const char* msg_kind_name(MsgKind k) {
  switch (k) {
    case MsgKind::kP2P: return "send/recv";
    case MsgKind::kAllReduce: return "allreduce";
    case MsgKind::kBroadcast: return "broadcast";
    case MsgKind::kReduce: return "reduce";
    case MsgKind::kAllGather: return "allgather";
    case MsgKind::kReduceScatter: return "reducescatter";
    case MsgKind::kAllToAll: return "alltoall";
    case MsgKind::kProbe: return "cost-probe";
    case MsgKind::kAllToAllv: return "alltoallv";
  }
  return "?";
}

Call::Call(qcclComm& c, const char* w, MsgKind k, size_t bytes, const char* algo, int peer)
    : comm(c),
      what(w),
      kind(k),
      seq(per_peer_seq(k) ? 0 : c.coll_seq++),
      fr_slot(c.fr.begin(seq, w, bytes, peer, algo)),
      timeout_s(c.timeout_s) {}

Xfer Xfer::send(int peer, const void* src, size_t bytes) {
  Xfer x;
  x.kind = kSend;
  x.peer = peer;
  x.src = src;
  x.bytes = bytes;
  return x;
}
Xfer Xfer::recv(int peer, void* dst, size_t bytes) {
  Xfer x;
  x.kind = kRecv;
  x.peer = peer;
  x.dst = dst;
  x.bytes = bytes;
  return x;
}
Xfer Xfer::recv_reduce(int peer, void* dst, const void* local, size_t bytes, bool received_first) {
  Xfer x;
  x.kind = kRecvReduce;
  x.peer = peer;
  x.dst = dst;
  x.local = local;
  x.bytes = bytes;
  x.received_first = received_first;
  return x;
}

Call::~Call() {
  if (!finished) comm.fr.end(fr_slot, FlightRecorder::kFailed);
}

void finish(Call& call) {
  call.finished = true;
  call.comm.fr.end(call.fr_slot, FlightRecorder::kDone);
}

namespace {
[[noreturn]] void throw_aborted(const Call& call) {
  QK_THROW(UsageError, call.what, " #", call.seq, " on rank ", call.comm.rank,
           " was interrupted: the communicator was aborted (qcclCommAbort)");
}

void run_transfers(Call& call, std::span<Xfer> xs);
}  // namespace

void run(Call& call, std::span<Xfer> xs) {
  try {
    run_transfers(call, xs);
  } catch (const qk::Error&) {
    // qcclCommAbort closes the connections, so a call it interrupts may
    // first see a closed socket: that is the abort, which include/qccl.h
    // reports as qcclInvalidUsage on every transport.
    if (call.comm.aborted.load()) throw_aborted(call);
    throw;
  }
}

namespace {
void run_transfers(Call& call, std::span<Xfer> xs) {
  qcclComm& comm = call.comm;
  for (Xfer& x : xs) {
    QK_INTERNAL_ASSERT(x.peer >= 0 && x.peer < comm.nranks && x.peer != comm.rank && comm.conns[x.peer],
                       "bad peer ", x.peer);
    if (!per_peer_seq(call.kind)) x.seq = static_cast<uint32_t>(call.seq);
    QK_INTERNAL_ASSERT(x.kind != Xfer::kRecvReduce || x.bytes % dtype_size(call.dtype) == 0);
  }
  size_t pending = xs.size();
  // Reused per thread: small calls should not pay for allocations (run() never nests).
  thread_local std::vector<uint8_t> complete;
  thread_local std::vector<int> after;
  thread_local std::vector<pollfd> pfds;
  complete.assign(xs.size(), 0);
  // Transfers to one peer in one direction share a stream: each waits for the
  // one before it (a group may send twice to the same peer).
  after.assign(xs.size(), -1);
  for (size_t i = 0; i < xs.size(); ++i)
    for (size_t j = i; j-- > 0;)
      if (xs[j].peer == xs[i].peer && (xs[j].kind == Xfer::kSend) == (xs[i].kind == Xfer::kSend)) {
        after[i] = static_cast<int>(j);
        break;
      }
  IdleWait wait(comm);
  bool gone_seen = false;  // a peer looked gone; one more pass before believing it
  while (pending > 0) {
    bool moved = false;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (complete[i] || (after[i] >= 0 && !complete[after[i]])) continue;
      Xfer& x = xs[i];
      Conn& c = *comm.conns[x.peer];
      switch (x.kind) {
        case Xfer::kSend: moved |= step_send(call, c, x); break;
        case Xfer::kRecv: moved |= step_recv(call, c, x); break;
        case Xfer::kRecvReduce: moved |= step_recv_reduce(call, c, x); break;
      }
      if (x.hdr_done == sizeof(MsgHeader) && x.done == x.bytes && x.partial == 0) {
        complete[i] = 1;
        --pending;
        auto& count = x.kind == Xfer::kSend ? comm.msgs_sent : comm.msgs_received;
        if (static_cast<size_t>(x.peer) < count.size()) ++count[x.peer];
        if (x.kind == Xfer::kSend) {
          comm.bytes_sent.fetch_add(x.bytes, std::memory_order_relaxed);
          comm.messages_sent.fetch_add(1, std::memory_order_relaxed);
        } else {
          comm.bytes_received.fetch_add(x.bytes, std::memory_order_relaxed);
          comm.messages_received.fetch_add(1, std::memory_order_relaxed);
        }
      }
    }
    if (pending == 0) break;
    if (moved) {
      gone_seen = false;
      wait.moved();
      continue;
    }
    if (wait.spinning()) continue;
    if (comm.aborted.load(std::memory_order_relaxed)) throw_aborted(call);
    const auto now = wait.now();
    if (call.deadline().expired()) {
      std::string msg = fmt::format(
          "{} #{} on rank {} of comm '{}' timed out after {} s {}; that peer is stalled or dead "
          "(QCCL_TIMEOUT_S / config.timeoutS sets the deadline)",
          call.what, call.seq, comm.rank, comm.name, call.deadline().total_seconds(),
          pending_list(call, xs));
      comm.fr.note(call.fr_slot, "timed out " + pending_list(call, xs));
      comm.fr.dump_on_error(comm.name, comm.rank, msg);
      QK_THROW(qk::TimeoutError, msg);
    }
    if (wait.peers_due(now)) {
      try {
        for (size_t i = 0; i < xs.size(); ++i)
          if (!complete[i]) comm.conns[xs[i].peer]->check_alive();
      } catch (const qk::Error&) {
        // A peer that is done may exit right after its last write: drain
        // what has arrived (one more pass) before taking it for gone.
        if (!gone_seen) {
          gone_seen = true;
          continue;
        }
        throw;
      }
    }
    // Wait: poll() when every pending transfer is on a socket; otherwise
    // yield, then sleep.
    pfds.clear();
    bool all_sockets = true;
    for (size_t i = 0; i < xs.size() && all_sockets; ++i) {
      if (complete[i]) continue;
      int fd = comm.conns[xs[i].peer]->poll_fd(xs[i].kind == Xfer::kSend);
      if (fd < 0) all_sockets = false;
      else pfds.push_back({fd, static_cast<short>(xs[i].kind == Xfer::kSend ? POLLOUT : POLLIN), 0});
    }
    if (all_sockets) {
      ::poll(pfds.data(), pfds.size(), call.deadline().poll_ms(10));
    } else {
      wait.yield_or_sleep(now);
    }
  }
}
}  // namespace

void wait_until(Call& call, const std::function<bool()>& ready, std::span<const int> peers, const char* what) {
  qcclComm& comm = call.comm;
  IdleWait wait(comm);
  for (;;) {
    if (ready()) return;
    if (wait.spinning()) continue;
    try {
      if (comm.aborted.load(std::memory_order_relaxed)) throw_aborted(call);
      if (call.deadline().expired()) {
        std::string msg = fmt::format(
            "{} #{} on rank {} of comm '{}' timed out after {} s waiting for {}; a peer is stalled or dead "
            "(QCCL_TIMEOUT_S / config.timeoutS sets the deadline)",
            call.what, call.seq, comm.rank, comm.name, call.deadline().total_seconds(), what);
        comm.fr.note(call.fr_slot, std::string("timed out waiting for ") + what);
        comm.fr.dump_on_error(comm.name, comm.rank, msg);
        QK_THROW(qk::TimeoutError, msg);
      }
      const auto now = wait.now();
      if (wait.peers_due(now))
        for (int p : peers) comm.conns[p]->check_alive();
      wait.yield_or_sleep(now);
    } catch (const qk::Error&) {
      if (comm.aborted.load()) throw_aborted(call);
      if (ready()) return;  // what we waited for arrived before its sender left
      throw;
    }
  }
}

}  // namespace qccl
