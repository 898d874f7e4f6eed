// A connection to one peer, as the algorithms see it: a non-blocking byte
// stream in each direction (NCCL's send/recv primitives over a transport
// table; gloo's Pair). Transports implement it; the engine (engine.h) drives
// several at once so a ring step sends and receives concurrently.
//
// Receiving is zero-copy where the transport allows: peek() exposes bytes in
// place (a shared-memory ring, a socket staging buffer), the caller reduces or
// copies them, then consume()s. Every method throws RemoteError when the peer
// is gone, naming it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace qccl {

class Conn {
 public:
  Conn(int peer, std::string peer_name) : peer_(peer), peer_name_(std::move(peer_name)) {}
  virtual ~Conn() = default;
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  virtual const char* kind() const = 0;  // "shm", "tcp"
  // Takes up to n bytes; returns how many it took (0 when full).
  virtual size_t try_send(const void* p, size_t n) = 0;
  // Takes up to na + nb bytes of a then b (a message's header and its data);
  // returns how many. Transports override it to hand both over at once (one
  // published head on shared memory, one segment on TCP): a small message
  // then costs the receiver one wake-up, not two.
  virtual size_t try_send2(const void* a, size_t na, const void* b, size_t nb) {
    size_t k = try_send(a, na);
    if (k < na || nb == 0) return k;
    return k + try_send(b, nb);
  }
  // Readable bytes in one contiguous run at *p (0 when none yet).
  virtual size_t peek(const void** p) = 0;
  virtual void consume(size_t n) = 0;
  // Copies up to n received bytes into p; returns how many.
  virtual size_t try_recv(void* p, size_t n) {
    size_t got = 0;
    while (got < n) {
      const void* src = nullptr;
      size_t avail = peek(&src);
      if (avail == 0) break;
      size_t k = avail < n - got ? avail : n - got;
      std::memcpy(static_cast<char*>(p) + got, src, k);
      consume(k);
      got += k;
    }
    return got;
  }
  // The socket to poll() while waiting to send (sending) or receive the next
  // bytes (TCP), or -1 when the transport is polled by spinning.
  virtual int poll_fd(bool /*sending*/) const { return -1; }
  // Sockets the stream is striped over (QCCL_NSOCKS for TCP).
  virtual int nsocks() const { return 1; }
  // Throws RemoteError if the peer has died or closed (cheap; called while idle).
  virtual void check_alive() = 0;
  // Tells the peer we are leaving and why (shown in its error where the
  // transport can carry it); pending and later calls on both sides fail.
  virtual void close(const std::string& reason) = 0;

  // Single copy (Linux CMA): the receiver reads the sender's buffer with
  // process_vm_readv instead of the bytes going through the transport. Only
  // shared memory offers it, and only where both processes may read each other.
  virtual bool cma() const { return false; }
  virtual int peer_pid() const { return -1; }  // same host only
  virtual void cma_ack() {}                         // receiver: done with one buffer
  virtual uint64_t cma_acks() const { return 0; }   // sender: buffers the peer is done with
  uint64_t cma_posted = 0;                          // sender: buffers offered so far

  // Whether both sides can map each other's qcclMemAlloc buffers
  // (transport/shared_mem.h), probed at set-up: only shared memory offers it.
  virtual bool maps_peer_memory() const { return false; }

  // A notice board per pair (shared memory only): a rank posts a few bytes
  // for one collective, the peer reads them when it gets there, without a
  // message in the stream (the direct all-reduce's buffer descriptors: a
  // rank whose buffers rule the direct path out posts and moves on).
  // board_post publishes n <= kBoardBytes bytes for collective `seq`;
  // board_read copies the peer's notice when it is for `seq` (else false).
  static constexpr size_t kBoardBytes = 120;
  virtual bool has_board() const { return false; }
  virtual void board_post(uint64_t /*seq*/, const void* /*p*/, size_t /*n*/) {}
  virtual bool board_read(uint64_t /*seq*/, void* /*p*/, size_t /*n*/) { return false; }

  // Shared memory: publish sent bytes at least every `bytes` (Tuning::shm_slice).
  virtual void set_publish_slice(size_t /*bytes*/) {}

  int peer() const { return peer_; }
  const std::string& peer_name() const { return peer_name_; }

 private:
  int peer_;
  std::string peer_name_;
};

}  // namespace qccl
