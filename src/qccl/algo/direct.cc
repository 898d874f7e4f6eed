#include "algo/direct.h"

#include <unistd.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <vector>

#include "algo/collectives.h"
#include "algo/ring_order.h"
#include "core/debug.h"
#include "core/reduce.h"
#include "transport/cma.h"
#include "transport/shared_mem.h"
#include "qk/base/env.h"

namespace qccl {

namespace {

QK_ENV_INT(env_direct, "QCCL_DIRECT", 1,
           "1: all-reduces of ranks on one host may go direct (each rank reduces its share straight "
           "between the ranks' buffers: qcclMemAlloc ones mapped, others by single copy); 0: never.");

enum : uint32_t { kShared = 1, kCanMap = 2, kCma = 4 };

// memcpy with non-temporal stores (SSE2, in every x86-64) for the aligned middle.
void stream_copy(char* dst, const char* src, size_t n) {
#if defined(__x86_64__)
  size_t head = (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16;
  if (n < head + 64) {
    std::memcpy(dst, src, n);
    return;
  }
  std::memcpy(dst, src, head);
  size_t i = head;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + i, src + i, n - i);
#else
  std::memcpy(dst, src, n);
#endif
}

// What a rank tells the others about its buffers: their addresses (for
// single-copy access) and, where they lie in qcclMemAlloc allocations, how
// to map them.
struct DirectDesc {
  uint32_t flags = 0;
  int32_t pid = 0;
  uint64_t send_addr = 0, recv_addr = 0;
  SharedRef send, recv;
};
static_assert(sizeof(DirectDesc) == 88);  // no padding: every byte on the board is set
static_assert(sizeof(DirectDesc) <= Conn::kBoardBytes);

void describe(DirectDesc* d, const qcclComm& c, const void* send, const void* recv, size_t bytes) {
  *d = DirectDesc{};
  d->pid = static_cast<int32_t>(::getpid());
  d->send_addr = reinterpret_cast<uint64_t>(send);
  d->recv_addr = reinterpret_cast<uint64_t>(recv);
  auto s = find_shared(send, bytes), r = find_shared(recv, bytes);
  if (s && r) {
    d->flags |= kShared;
    d->send = *s;
    d->recv = *r;
  }
  bool maps = true, cma = true;
  for (int p = 0; p < c.nranks; ++p) {
    if (p == c.rank) continue;
    maps &= c.conns[p]->maps_peer_memory();
    cma &= c.conns[p]->cma();
  }
  if (maps) d->flags |= kCanMap;
  if (cma) d->flags |= kCma;
}

char* mapped(qcclComm& c, int peer, const DirectDesc& d, const SharedRef& ref, size_t bytes) {
  const std::string who = c.peer_name(peer);
  QK_CHECK_AS(RemoteError, ref.offset <= ref.region_bytes && bytes <= ref.region_bytes - ref.offset,
              who, " described a shared buffer of ", bytes, " bytes at offset ", ref.offset,
              " in an allocation of ", ref.region_bytes);
  return c.peer_maps.map(d.pid, ref, who) + ref.offset;
}

// One rank's buffers as this rank reaches them: mapped (plain loads and
// stores) or through single-copy system calls at the peer's addresses.
struct Window {
  const char* src = nullptr;
  char* dst = nullptr;
  uint64_t src_addr = 0, dst_addr = 0;
  bool cma = false;
};

}  // namespace

bool direct_candidate(const qcclComm& c) {
  if (c.nranks < 2 || env_direct.get() == 0) return false;
  for (const PeerInfo& p : c.peers)
    if (p.host_hash != c.peers[0].host_hash) return false;
  return true;
}

bool direct_all_reduce(Call& call, const char* send, char* recv, size_t count, size_t es,
                       bool allow_cma) {
  qcclComm& c = call.comm;
  const int n = c.nranks, r = c.rank;
  const size_t bytes = count * es;
  std::vector<DirectDesc> descs(n);
  describe(&descs[r], c, send, recv, bytes);
  const bool mine_mapped = descs[r].flags == (kShared | kCanMap | (descs[r].flags & kCma));
  if (allow_cma && !mine_mapped) {
    advise_huge_pages(send, bytes);
    if (recv != send) advise_huge_pages(recv, bytes);
  }
  // Descriptors go on the pairs' notice boards, not into the streams. A rank
  // whose own buffers rule the direct path out (not shared, and single copy
  // not chosen) posts and moves on: the others will read that and fall back
  // too, so a call on plain buffers pays n-1 small stores for the check, not
  // a round of messages (4 ranks on 2 cores: a round cost 40-140 us at 64
  // KiB-1 MiB, more than the ring's own time). A notice stays until the
  // poster's next all-reduce, which cannot start before every rank has
  // joined this one: its result needs every rank's input.
  for (int p = 0; p < n; ++p)
    if (p != r && !c.conns[p]->has_board()) return false;  // tcp: no direct path
  for (int p = 0; p < n; ++p)
    if (p != r) c.conns[p]->board_post(call.seq, &descs[r], sizeof(DirectDesc));
  if (!allow_cma && !mine_mapped) return false;
  thread_local std::vector<int> peers;
  thread_local std::vector<uint8_t> got;
  peers.clear();
  got.assign(n, 0);
  for (int p = 0; p < n; ++p)
    if (p != r) peers.push_back(p);
  wait_until(call, [&] {
    bool all = true;
    for (int p : peers)
      if (!got[p]) all &= (got[p] = c.conns[p]->board_read(call.seq, &descs[p], sizeof(DirectDesc))) != 0;
    return all;
  }, peers, "the other ranks' buffer descriptors");
  // Every rank sees every descriptor, so all decide alike: mapped where all
  // buffers are shared and mappable; else single copy where every rank has
  // it to every other (each still maps the shared buffers it can).
  bool all_mapped = true, all_cma = allow_cma;
  for (int p = 0; p < n; ++p) {
    QK_CHECK_AS(RemoteError, p == r || descs[p].pid == c.conns[p]->peer_pid(), c.peer_name(p),
                " described buffers of pid ", descs[p].pid, " instead of its own");
    all_mapped &= descs[p].flags == (kShared | kCanMap | (descs[p].flags & kCma));
    all_cma &= (descs[p].flags & kCma) != 0;
  }
  if (!all_mapped && !all_cma) return false;

  std::vector<Window> win(n);
  const bool can_map = (descs[r].flags & kCanMap) != 0;
  for (int p = 0; p < n; ++p) {
    Window& w = win[p];
    if (p == r) {
      w.src = send;
      w.dst = recv;
    } else if (can_map && (descs[p].flags & kShared)) {
      w.src = mapped(c, p, descs[p], descs[p].send, bytes);
      w.dst = mapped(c, p, descs[p], descs[p].recv, bytes);
    } else {
      w.cma = true;
      w.src_addr = descs[p].send_addr;
      w.dst_addr = descs[p].recv_addr;
    }
  }
  // Our share, a chunk at a time: reduce in rank order into `acc` (operands
  // read single-copy land in `tmp` first), then store it everywhere. Chunks
  // stay in cache between the reads and the stores.
  const size_t chunk_bytes = all_mapped ? c.tuning.direct_chunk : c.tuning.cma_chunk;
  thread_local std::vector<char> acc, tmp;
  acc.resize(chunk_bytes);
  tmp.resize(chunk_bytes);
  const size_t chunk = std::max<size_t>(1, chunk_bytes / es);
  const Segment seg = segment(count, n, r);
  const bool stream = bytes >= c.tuning.stream_from;
  auto operand = [&](int k, size_t at, size_t len, char* into) -> const char* {
    if (!win[k].cma) return win[k].src + at;
    cma_read(*c.conns[k], into, win[k].src_addr + at, len);
    return into;
  };
  for (size_t o = seg.off; o < seg.off + seg.len; o += chunk) {
    size_t m = std::min(chunk, seg.off + seg.len - o);
    size_t at = o * es, len = m * es;
    const char* a = operand(0, at, len, acc.data());
    const char* b = operand(1, at, len, tmp.data());
    reduce(acc.data(), a, b, m, call.dtype, call.op);
    for (int k = 2; k < n; ++k)
      reduce(acc.data(), acc.data(), operand(k, at, len, tmp.data()), m, call.dtype, call.op);
    if (call.op == qcclAvg) finish_avg(acc.data(), m, call.dtype, n);
    for (int k = 0; k < n; ++k) {
      const Window& w = win[k];
      if (w.cma) cma_write(*c.conns[k], w.dst_addr + at, acc.data(), len);
      else if (stream && w.dst != w.src) stream_copy(w.dst + at, acc.data(), len);
      else std::memcpy(w.dst + at, acc.data(), len);
    }
  }
#if defined(__x86_64__)
  if (stream) _mm_sfence();  // the streamed stores before the completion message
#endif
  // Done: every rank has stopped touching the others' buffers once it has
  // heard from all (the ring's release/acquire orders our stores before it;
  // a single-copy write has landed when its system call returns).
  std::vector<Xfer> xs;
  xs.reserve(2 * (n - 1));
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    xs.push_back(Xfer::send(p, nullptr, 0));
    xs.push_back(Xfer::recv(p, nullptr, 0));
  }
  run(call, xs);
  ++c.direct_calls;
  if (!all_mapped) ++c.direct_cma_calls;
  // Our share went through every peer's buffers: read from each, stored into each.
  const uint64_t moved = static_cast<uint64_t>(seg.len) * es * static_cast<uint64_t>(n - 1);
  c.bytes_received.fetch_add(moved, std::memory_order_relaxed);
  c.bytes_sent.fetch_add(moved, std::memory_order_relaxed);
  return true;
}

}  // namespace qccl
