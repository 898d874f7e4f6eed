#include "transport/shm.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/debug.h"
#include "transport/cma.h"
#include "transport/shared_mem.h"
#include "qk/base/env.h"

namespace qccl {

namespace {

QK_ENV_INT(env_ring_bytes, "QCCL_SHM_RING_BYTES", 1 << 20,
           "Bytes in each shared-memory ring (one per direction per peer pair).");

constexpr uint64_t kSegMagic = 0x51434353484d3031ull;  // "QCCSHM01"
constexpr uint32_t kSegVersion = 4;  // 2: the set-up also probes shared buffers; 3: notice boards; 4: mailboxes
// Producers publish at least every slice so the consumer can start early
// (Tuning::shm_slice, set by the communicator; the 1 MiB ring is not tuned).
constexpr size_t kDefaultSlice = 64 << 10;

struct RingCtl {
  alignas(64) std::atomic<uint64_t> head;   // bytes produced, ever
  alignas(64) std::atomic<uint64_t> tail;   // bytes consumed, ever
  alignas(64) std::atomic<uint32_t> closed;  // set by either side on close/abort
  alignas(64) std::atomic<uint64_t> cma_acks;  // single-copy buffers the consumer finished
};

// Conn::board_post / board_read: a sequence lock, written by one side only.
struct BoardSlot {
  alignas(64) std::atomic<uint64_t> seq;  // collective + 1 once the notice is complete; odd writes pending
  std::atomic<uint64_t> writes;           // bumped before and after each write (seqlock)
  char data[Conn::kBoardBytes];
};

// Small messages (header and data up to kBoxMaxBytes) go in a mailbox of
// cache lines beside the ring, Open MPI's fast boxes: a message starts at a
// line whose first 8 bytes are its tag (message number and length), stored
// after the bytes, so the receiver's first miss brings the tag with the
// first 56 bytes; through the ring it takes the head's line, then the data's
// (a raw exchange of one line each way: 0.09 us against 0.12 us on the EPYC
// VM). A message never wraps: where it would, a skip tag sends both sides
// to the box's first line. The receiver zeroes the tag word of a message's
// later lines when done, so stale data there never passes for a tag.
//
// Order: a sender uses the box only when the receiver has consumed
// everything it put in the ring, and a receiver takes the box's next
// message, when there, before the ring; so ring bytes sent after a box
// message are read after it (the receiver loads the ring's head before the
// tag, and a head that shows them makes the earlier tag visible).
constexpr size_t kLine = kShmLine;
constexpr size_t kBoxLines = kShmBoxLines;       // per direction: 4 KiB
constexpr size_t kBoxMaxBytes = kShmBoxMaxBytes;  // 8 lines less the tag: 504
constexpr uint64_t kSkip = 0xffff;               // the tag's length field: go to line 0
struct MailBox {
  alignas(kLine) char line[kBoxLines][kLine];
  alignas(kLine) std::atomic<uint64_t> consumed;  // lines the receiver is done with, ever
};
inline uint64_t box_tag(uint64_t number, uint64_t bytes) { return shm_box_tag(number, bytes); }
inline std::atomic_ref<uint64_t> tag_at(MailBox* b, uint64_t line) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(b->line[line % kBoxLines]));
}
inline size_t lines_for(size_t bytes) { return (8 + bytes + kLine - 1) / kLine; }

struct SegHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t pad;
  uint64_t ring_bytes;
  RingCtl ring[2];  // ring 0: low rank -> high rank; ring 1: high -> low
  char reason[2][256];  // why side 0 / side 1 closed, written before `closed`
  BoardSlot board[2];   // posted by side 0 / side 1
  MailBox box[2];       // as the rings: 0 low -> high, 1 high -> low
};

constexpr size_t kDataOffset = (sizeof(SegHeader) + 4095) & ~size_t(4095);

struct NameMsg {
  char name[64];
  uint64_t bytes;
  uint64_t base;  // the creator's mapping, for the CMA probe
};
struct AckMsg {
  char ok;
  char pad[7];
  uint64_t base;  // the opener's mapping
};

class ShmConn final : public Conn {
 public:
  ShmConn(int peer, std::string name, Fd ctl, void* base, size_t map_bytes, int side, int peer_pid,
          bool cma, bool maps)
      : Conn(peer, std::move(name)),
        ctl_(std::move(ctl)),
        base_(base),
        map_bytes_(map_bytes),
        peer_pid_(peer_pid),
        cma_(cma),
        maps_(maps) {
    auto* h = static_cast<SegHeader*>(base);
    cap_ = h->ring_bytes;
    char* data = static_cast<char*>(base) + kDataOffset;
    int send_ring = side == 0 ? 0 : 1;
    tx_ = &h->ring[send_ring];
    rx_ = &h->ring[1 - send_ring];
    tx_box_ = &h->box[send_ring];
    rx_box_ = &h->box[1 - send_ring];
    side_ = side;
    tx_data_ = data + send_ring * cap_;
    rx_data_ = data + (1 - send_ring) * cap_;
    tx_head_ = tx_->head.load(std::memory_order_relaxed);
    tx_tail_ = tx_->tail.load(std::memory_order_relaxed);
    rx_tail_ = rx_->tail.load(std::memory_order_relaxed);
  }
  ~ShmConn() override { ::munmap(base_, map_bytes_); }

  const char* kind() const override { return "shm"; }

  // Free bytes in the send ring, reading the consumer's tail only when the
  // last value read leaves fewer than `want`: that read misses the cache
  // whenever the consumer has moved since.
  size_t space_for(size_t want) {
    size_t space = cap_ - static_cast<size_t>(tx_head_ - tx_tail_);
    if (space >= want) return space;
    tx_tail_ = tx_->tail.load(std::memory_order_acquire);
    return cap_ - static_cast<size_t>(tx_head_ - tx_tail_);
  }
  // Whether the receiver has consumed all we put in the ring (the mailbox
  // may be used only then); reads its tail only when the last value read
  // says not.
  bool ring_drained() {
    if (tx_tail_ != tx_head_) tx_tail_ = tx_->tail.load(std::memory_order_acquire);
    return tx_tail_ == tx_head_;
  }
  // Whether `lines` lines of the mailbox are free, reading the receiver's
  // count only when the last value read leaves too few.
  bool box_free(size_t lines) {
    if (tx_line_ + lines - tx_lines_done_ > kBoxLines)
      tx_lines_done_ = tx_box_->consumed.load(std::memory_order_acquire);
    return tx_line_ + lines - tx_lines_done_ <= kBoxLines;
  }
  // Puts a message of na + nb (<= kBoxMaxBytes) bytes in the mailbox, if it fits.
  bool box_send(const void* a, size_t na, const void* b, size_t nb) {
    const size_t lines = lines_for(na + nb);
    const size_t to_end = kBoxLines - tx_line_ % kBoxLines;
    const size_t skip = lines > to_end ? to_end : 0;
    if (!box_free(skip + lines)) return false;
    if (skip > 0) {
      tag_at(tx_box_, tx_line_).store(box_tag(tx_msg_no_++, kSkip), std::memory_order_release);
      tx_line_ += skip;
    }
    char* at = tx_box_->line[tx_line_ % kBoxLines] + 8;
    std::memcpy(at, a, na);
    if (nb > 0) std::memcpy(at + na, b, nb);
    tag_at(tx_box_, tx_line_).store(box_tag(tx_msg_no_++, na + nb), std::memory_order_release);
    tx_line_ += lines;
    return true;
  }
  // Copies n bytes (space checked) at the head, across the wrap point; does not publish.
  void copy_in(const void* p, size_t n) {
    size_t off = static_cast<size_t>(tx_head_ % cap_);
    size_t k = std::min(n, cap_ - off);
    std::memcpy(tx_data_ + off, p, k);
    std::memcpy(tx_data_, static_cast<const char*>(p) + k, n - k);
    tx_head_ += n;
  }

  void set_publish_slice(size_t bytes) override { slice_ = std::max<size_t>(bytes, kLine); }

  size_t try_send(const void* p, size_t n) override {
    const char* src = static_cast<const char*>(p);
    size_t sent = 0;
    while (sent < n) {
      size_t space = space_for(1);
      if (space == 0) break;
      size_t off = static_cast<size_t>(tx_head_ % cap_);
      size_t k = std::min<size_t>({n - sent, space, cap_ - off, slice_});
      std::memcpy(tx_data_ + off, src + sent, k);
      tx_head_ += k;
      tx_->head.store(tx_head_, std::memory_order_release);
      sent += k;
    }
    return sent;
  }

  // A small message in the mailbox where order allows (see MailBox);
  // otherwise header and data in one publication when both fit: the
  // consumer sees the whole message at its first look.
  size_t try_send2(const void* a, size_t na, const void* b, size_t nb) override {
    if (na + nb > 0 && na + nb <= kBoxMaxBytes && ring_drained() && box_send(a, na, b, nb)) return na + nb;
    if (na + nb > slice_ || space_for(na + nb) < na + nb) return Conn::try_send2(a, na, b, nb);
    copy_in(a, na);
    if (nb > 0) copy_in(b, nb);
    tx_->head.store(tx_head_, std::memory_order_release);
    return na + nb;
  }

  size_t peek(const void** p) override {
    if (rx_box_bytes_ > 0) return box_run(p);  // a message part read: its head is not needed
    const uint64_t head = rx_->head.load(std::memory_order_acquire);  // before the tag (see MailBox)
    while (rx_box_bytes_ == 0) {
      const uint64_t tag = tag_at(rx_box_, rx_line_).load(std::memory_order_acquire);
      if (tag >> 16 != rx_msg_no_ + 1) break;
      ++rx_msg_no_;
      if ((tag & 0xffff) == kSkip) {
        rx_line_ += kBoxLines - rx_line_ % kBoxLines;
        rx_box_->consumed.store(rx_line_, std::memory_order_release);
        continue;
      }
      rx_box_bytes_ = static_cast<size_t>(tag & 0xffff);
      rx_box_off_ = 0;
    }
    if (rx_box_bytes_ > 0) return box_run(p);
    size_t avail = static_cast<size_t>(head - rx_tail_);
    size_t off = static_cast<size_t>(rx_tail_ % cap_);
    *p = rx_data_ + off;
    return std::min(avail, cap_ - off);
  }

  // The unread rest of the mailbox message being read.
  size_t box_run(const void** p) const {
    *p = rx_box_->line[rx_line_ % kBoxLines] + 8 + rx_box_off_;
    return rx_box_bytes_ - rx_box_off_;
  }

  void consume(size_t n) override {
    if (rx_box_bytes_ > 0) {
      rx_box_off_ += n;
      if (rx_box_off_ < rx_box_bytes_) return;
      const size_t lines = lines_for(rx_box_bytes_);
      for (size_t l = 1; l < lines; ++l) tag_at(rx_box_, rx_line_ + l).store(0, std::memory_order_relaxed);
      rx_box_bytes_ = 0;
      rx_line_ += lines;
      rx_box_->consumed.store(rx_line_, std::memory_order_release);
      return;
    }
    rx_tail_ += n;
    rx_->tail.store(rx_tail_, std::memory_order_release);
  }

  bool has_board() const override { return true; }
  void board_post(uint64_t seq, const void* p, size_t n) override {
    BoardSlot& b = static_cast<SegHeader*>(base_)->board[side_];
    b.writes.fetch_add(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    std::memcpy(b.data, p, std::min(n, sizeof b.data));
    b.seq.store(seq + 1, std::memory_order_relaxed);
    b.writes.fetch_add(1, std::memory_order_release);
  }
  bool board_read(uint64_t seq, void* p, size_t n) override {
    BoardSlot& b = static_cast<SegHeader*>(base_)->board[1 - side_];
    uint64_t w = b.writes.load(std::memory_order_acquire);
    if (w % 2 != 0 || b.seq.load(std::memory_order_relaxed) != seq + 1) return false;
    std::memcpy(p, b.data, std::min(n, sizeof b.data));
    std::atomic_thread_fence(std::memory_order_acquire);
    return b.writes.load(std::memory_order_relaxed) == w;
  }

  bool cma() const override { return cma_; }
  bool maps_peer_memory() const override { return maps_; }
  int peer_pid() const override { return peer_pid_; }
  void cma_ack() override { rx_->cma_acks.fetch_add(1, std::memory_order_release); }
  uint64_t cma_acks() const override { return tx_->cma_acks.load(std::memory_order_acquire); }

  void check_alive() override {
    if (rx_->closed.load(std::memory_order_acquire) || tx_->closed.load(std::memory_order_acquire)) {
      auto* h = static_cast<SegHeader*>(base_);
      std::string why(h->reason[1 - side_], strnlen(h->reason[1 - side_], sizeof h->reason[0]));
      QCCL_REMOTE_ERROR(peer_name(), " closed its shared-memory connection",
                        why.empty() ? std::string(" (it failed or aborted; check its log)")
                                    : ": it gave up because: " + why);
    }
    pollfd pf{ctl_.get(), POLLIN, 0};
    if (::poll(&pf, 1, 0) > 0) {
      char c;
      ssize_t k = ::recv(ctl_.get(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
        QCCL_REMOTE_ERROR(peer_name(), " is gone: its control socket closed (the process exited or was killed)");
    }
  }

  void close(const std::string& reason) override {
    auto* h = static_cast<SegHeader*>(base_);
    std::snprintf(h->reason[side_], sizeof h->reason[0], "%s", reason.c_str());
    tx_->closed.store(1, std::memory_order_release);
    rx_->closed.store(1, std::memory_order_release);
    ::shutdown(ctl_.get(), SHUT_RDWR);
  }

 private:
  Fd ctl_;
  void* base_;
  size_t map_bytes_;
  size_t cap_ = 0;
  size_t slice_ = kDefaultSlice;
  RingCtl* tx_;
  RingCtl* rx_;
  char* tx_data_;
  char* rx_data_;
  uint64_t tx_head_ = 0;  // our copy of tx_->head (we are its only writer)
  uint64_t tx_tail_ = 0;  // tx_->tail as last read (it only grows)
  uint64_t rx_tail_ = 0;  // our copy of rx_->tail
  MailBox* tx_box_;
  MailBox* rx_box_;
  uint64_t tx_line_ = 0;        // mailbox lines we filled, ever
  uint64_t tx_lines_done_ = 0;  // tx_box_->consumed as last read
  uint64_t tx_msg_no_ = 0;      // mailbox messages (skips too) we sent
  uint64_t rx_line_ = 0;        // the mailbox line the next message starts at
  uint64_t rx_msg_no_ = 0;      // mailbox messages taken
  size_t rx_box_bytes_ = 0;     // bytes of the message being read (0: none)
  size_t rx_box_off_ = 0;       // of which consumed
  int peer_pid_;
  bool cma_;
  bool maps_;
  int side_ = 0;
};

std::atomic<uint64_t> g_seg_counter{0};

}  // namespace

size_t shm_ring_bytes() { return static_cast<size_t>(std::max<int64_t>(0, env_ring_bytes.get())); }

std::unique_ptr<Conn> make_shm_conn(int my_rank, int peer, std::string peer_name, Fd ctl,
                                    int peer_pid, bool want_cma, const Deadline& dl) {
  bool creator = my_rank < peer;
  NameMsg msg{};
  int fd = -1;
  size_t ring = 0;
  if (creator) {
    int64_t want = env_ring_bytes.get();
    QK_CHECK(want >= 4096 && want <= (int64_t(1) << 30) && want % 64 == 0,
             "QCCL_SHM_RING_BYTES: expected a multiple of 64 in [4096, 1 GiB], got ", want);
    ring = static_cast<size_t>(want);
    std::snprintf(msg.name, sizeof msg.name, "/qccl-%d-%d-%d-%llu", static_cast<int>(::getpid()),
                  my_rank, peer, static_cast<unsigned long long>(g_seg_counter++));
    msg.bytes = kDataOffset + 2 * ring;
    fd = ::shm_open(msg.name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
      QK_THROW(qk::IoError, "shm_open(", msg.name, ") failed: ", qk::detail::errno_string(errno),
               "; is /dev/shm mounted and writable? (QCCL_TRANSPORT=tcp avoids shared memory)");
    if (::ftruncate(fd, static_cast<off_t>(msg.bytes)) != 0) {
      int err = errno;
      ::close(fd);
      ::shm_unlink(msg.name);
      QK_THROW(qk::IoError, "sizing shared memory ", msg.name, " to ", msg.bytes,
               " bytes failed: ", qk::detail::errno_string(err), " (is /dev/shm full?)");
    }
  } else {
    recv_all(ctl.get(), &msg, sizeof msg, dl, peer_name);
    msg.name[sizeof msg.name - 1] = '\0';
    QK_CHECK_AS(RemoteError, std::strncmp(msg.name, "/qccl-", 6) == 0 && msg.bytes > kDataOffset &&
                    msg.bytes <= kDataOffset + 2 * (size_t(1) << 30),
                peer_name, " sent a malformed shared-memory offer (name '", msg.name, "', ",
                msg.bytes, " bytes)");
    fd = ::shm_open(msg.name, O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
      QK_THROW(qk::IoError, "opening shared memory ", msg.name, " from ", peer_name, " failed: ",
               qk::detail::errno_string(errno), " (are both ranks on the same host and user?)");
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != msg.bytes) {
      ::close(fd);
      QCCL_REMOTE_ERROR("shared memory ", msg.name, " from ", peer_name, " has the wrong size");
    }
  }
  // Populated now: faulting the rings in page by page cost the first ~10
  // calls of 128 KiB up to 3x their steady time (one fault per 4 KiB as the
  // head first goes round).
  void* base = ::mmap(nullptr, msg.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  int map_err = errno;
  ::close(fd);
  if (base == MAP_FAILED) {
    if (creator) ::shm_unlink(msg.name);
    QK_THROW(qk::IoError, "mmap of ", msg.bytes, " bytes of shared memory failed: ",
             qk::detail::errno_string(map_err));
  }
  auto* h = static_cast<SegHeader*>(base);
  bool cma = false, maps = false;
  try {
    uint64_t peer_base = 0;
    if (creator) {
      new (h) SegHeader{};
      h->magic = kSegMagic;
      h->version = kSegVersion;
      h->ring_bytes = ring;
      msg.base = reinterpret_cast<uint64_t>(base);
      send_all(ctl.get(), &msg, sizeof msg, dl, peer_name);
      AckMsg ack{};
      recv_all(ctl.get(), &ack, sizeof ack, dl, peer_name);
      ::shm_unlink(msg.name);
      QK_CHECK_AS(RemoteError, ack.ok == 'k', peer_name, " could not map our shared memory");
      peer_base = ack.base;
    } else {
      AckMsg ack{};
      ack.ok = (h->magic == kSegMagic && h->version == kSegVersion &&
                kDataOffset + 2 * h->ring_bytes == msg.bytes)
                   ? 'k'
                   : 'x';
      ack.base = reinterpret_cast<uint64_t>(base);
      send_all(ctl.get(), &ack, sizeof ack, dl, peer_name);
      QK_CHECK_AS(RemoteError, ack.ok == 'k', "shared memory from ", peer_name,
                  " has a bad header (magic/version/size); mixed qccl versions?");
      peer_base = msg.base;
    }
    // Each side says what it could do; a feature is on only where both can.
    auto both = [&](bool mine) {
      char m = mine ? 1 : 0, theirs = 0;
      send_all(ctl.get(), &m, 1, dl, peer_name);
      recv_all(ctl.get(), &theirs, 1, dl, peer_name);
      return mine && theirs == 1;
    };
    // Single copy: both sides may read and write each other (the probe reads
    // the peer's copy of the segment magic and writes it back; ptrace policy,
    // seccomp or different users deny it).
    cma = both(want_cma && cma_probe(peer_pid, peer_base, kSegMagic));
    // Shared buffers (qcclMemAlloc): both sides may map each other's. Our
    // probe lives until the peer's answer says it is done with it.
    SharedProbe probe;
    SharedRef their_probe;
    send_all(ctl.get(), &probe.ref, sizeof probe.ref, dl, peer_name);
    recv_all(ctl.get(), &their_probe, sizeof their_probe, dl, peer_name);
    maps = both(can_map_peer(peer_pid, their_probe));
  } catch (...) {
    if (creator) ::shm_unlink(msg.name);
    ::munmap(base, msg.bytes);
    throw;
  }
  return std::make_unique<ShmConn>(peer, std::move(peer_name), std::move(ctl), base, msg.bytes,
                                   creator ? 0 : 1, peer_pid, cma, maps);
}

}  // namespace qccl
