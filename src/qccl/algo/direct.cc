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
#include "transport/registry.h"
#include "transport/shared_mem.h"
#include "qk/base/env.h"

namespace qccl {

namespace {

QK_ENV_INT(env_direct, "QCCL_DIRECT", 1,
           "1: all-reduces of ranks on one host may go direct (each rank reduces its share straight "
           "between the ranks' buffers: qcclMemAlloc ones mapped, others by single copy); 0: never.");

enum : uint32_t { kCanMap = 2, kCma = 4 };

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

// One buffer as a rank describes it: its address (for single copy) and the
// part of it the others can map: [head, head + mapped) bytes lie in the
// allocation `ref` (qcclMemAlloc: all of it; a registered plain buffer: its
// whole pages, registry.h), at ref.offset.
struct BufDesc {
  uint64_t addr = 0;
  uint64_t head = 0;
  uint64_t mapped = 0;
  SharedRef ref;
};
struct DirectDesc {
  uint32_t flags = 0;
  int32_t pid = 0;
  BufDesc send, recv;
};
static_assert(sizeof(DirectDesc) == 120);  // no padding: every byte on the board is set
static_assert(sizeof(DirectDesc) <= Conn::kBoardBytes);

BufDesc describe_buffer(const void* p, size_t bytes, bool may_look_up, bool may_register) {
  BufDesc b;
  b.addr = reinterpret_cast<uint64_t>(p);
  if (auto ref = find_shared(p, bytes)) {
    b.mapped = bytes;
    b.ref = *ref;
  } else if (!may_look_up) {
    return b;
  } else if (auto reg = registered(p, bytes, may_register)) {
    b.head = reg->head;
    b.mapped = reg->mapped;
    b.ref = reg->ref;
  }
  return b;
}

bool fully_mapped(const BufDesc& b, size_t bytes) { return b.head == 0 && b.mapped == bytes; }

// A rank wants the direct path on its own account when both its buffers can
// be mapped, wholly or in part.
bool ready(const DirectDesc& d) { return d.send.mapped > 0 && d.recv.mapped > 0; }

void describe(DirectDesc* d, const qcclComm& c, const void* send, const void* recv, size_t bytes) {
  *d = DirectDesc{};
  d->pid = static_cast<int32_t>(::getpid());
  bool maps = true, cma = true;
  for (int p = 0; p < c.nranks; ++p) {
    if (p == c.rank) continue;
    maps &= c.conns[p]->maps_peer_memory();
    cma &= c.conns[p]->cma();
  }
  if (maps) d->flags |= kCanMap;
  if (cma) d->flags |= kCma;
  // Plain buffers are registered only where every peer can map them and
  // reach the bytes outside their whole pages by single copy.
  // From Tuning::register_min_bytes only: checking a registration costs a
  // system call per buffer.
  const bool may_register = maps && cma && c.cost.cma_everywhere;
  const bool look_up = may_register && bytes >= c.tuning.register_min_bytes;
  const uint64_t gen = generation();
  d->send = describe_buffer(send, bytes, look_up, may_register);
  d->recv = recv == send ? d->send : describe_buffer(recv, bytes, look_up, may_register);
  // Registering one buffer may have replaced the registration the other lay in.
  if (generation() != gen) {
    d->send = describe_buffer(send, bytes, look_up, false);
    d->recv = recv == send ? d->send : describe_buffer(recv, bytes, look_up, false);
  }
}

// A peer's buffer as this rank reaches it: loads and stores where mapped
// ([lo, hi) in buffer bytes, `base` the buffer's start in our address
// space), single copy at `addr` elsewhere.
struct View {
  char* base = nullptr;
  uint64_t lo = 0, hi = 0;
  uint64_t addr = 0;
  Conn* conn = nullptr;  // null: our own buffer, all of it mapped
};

View view_of(qcclComm& c, int peer, const DirectDesc& d, const BufDesc& b, size_t bytes, bool can_map) {
  View v;
  v.addr = b.addr;
  v.conn = c.conns[peer].get();
  if (!can_map || b.mapped == 0) return v;
  const std::string who = c.peer_name(peer);
  const SharedRef& ref = b.ref;
  QK_CHECK_AS(RemoteError, b.head <= bytes && b.mapped <= bytes - b.head && ref.offset <= ref.region_bytes &&
                               b.mapped <= ref.region_bytes - ref.offset,
              who, " described a shared part of ", b.mapped, " bytes at ", b.head, " of a ", bytes,
              "-byte buffer, at offset ", ref.offset, " in an allocation of ", ref.region_bytes);
  char* region = c.peer_maps.map(d.pid, ref, who, b.addr + b.head - ref.offset);
  v.base = region + ref.offset - b.head;
  v.lo = b.head;
  v.hi = b.head + b.mapped;
  return v;
}

View own_view(const char* p, size_t bytes) {
  View v;
  v.base = const_cast<char*>(p);
  v.hi = bytes;
  return v;
}

// Bytes [at, at + len) of a buffer: a pointer into it where mapped, else
// copied into `into` (single copy for the parts outside the mapping).
const char* fetch(const View& v, size_t at, size_t len, char* into) {
  if (v.lo <= at && at + len <= v.hi) return v.base + at;
  for (size_t o = at; o < at + len;) {
    bool in = v.lo <= o && o < v.hi;
    size_t end = in ? std::min<size_t>(at + len, v.hi) : (o < v.lo ? std::min<size_t>(at + len, v.lo) : at + len);
    if (in) std::memcpy(into + (o - at), v.base + o, end - o);
    else cma_read(*v.conn, into + (o - at), v.addr + o, end - o);
    o = end;
  }
  return into;
}

// Stores `src` at [at, at + len) of a buffer, streamed where asked.
void store(const View& v, size_t at, size_t len, const char* src, bool stream) {
  for (size_t o = at; o < at + len;) {
    bool in = v.lo <= o && o < v.hi;
    size_t end = in ? std::min<size_t>(at + len, v.hi) : (o < v.lo ? std::min<size_t>(at + len, v.lo) : at + len);
    if (!in) cma_write(*v.conn, v.addr + o, src + (o - at), end - o);
    else if (stream) stream_copy(v.base + o, src + (o - at), end - o);
    else std::memcpy(v.base + o, src + (o - at), end - o);
    o = end;
  }
}

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
  // Registrations keep still while peers may touch them (fork waits).
  auto pin = pin_registrations();
  std::vector<DirectDesc> descs(n);
  describe(&descs[r], c, send, recv, bytes);
  const bool mine_ready = ready(descs[r]);
  // Huge pages for what peers will copy (registered pages they map: no
  // pinning to save there).
  if (allow_cma && descs[r].send.mapped == 0) advise_huge_pages(send, bytes);
  if (allow_cma && recv != send && descs[r].recv.mapped == 0) advise_huge_pages(recv, bytes);
  // Descriptors go on the pairs' notice boards, not into the streams. A rank
  // whose own buffers rule the direct path out (not mappable, and single copy
  // not chosen) posts and moves on: the others will read that and fall back
  // too, so a call on plain buffers pays n-1 small stores for the check, not
  // a round of messages (with more ranks than cores such a round waits until
  // every rank has been scheduled once more). A notice stays until the
  // poster's next all-reduce, which cannot start before every rank has
  // joined this one: its result needs every rank's input.
  for (int p = 0; p < n; ++p)
    if (p != r && !c.conns[p]->has_board()) return false;  // tcp: no direct path
  for (int p = 0; p < n; ++p)
    if (p != r) c.conns[p]->board_post(call.seq, &descs[r], sizeof(DirectDesc));
  if (!allow_cma && !mine_ready) return false;
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
  // Every rank sees every descriptor, so all decide alike: direct when
  // single copy was chosen (then every rank can reach every other) or every
  // rank's buffers can be mapped; mapped wholly on every rank, nothing else
  // is needed, else single copy between every pair for the rest.
  bool all_ready = true, all_full = true, all_cma = true;
  for (int p = 0; p < n; ++p) {
    const DirectDesc& d = descs[p];
    QK_CHECK_AS(RemoteError, p == r || d.pid == c.conns[p]->peer_pid(), c.peer_name(p),
                " described buffers of pid ", d.pid, " instead of its own");
    all_ready &= ready(d);
    all_full &= (d.flags & kCanMap) && fully_mapped(d.send, bytes) && fully_mapped(d.recv, bytes);
    all_cma &= (d.flags & kCma) != 0;
  }
  if (!((allow_cma && all_cma) || (all_ready && (all_full || all_cma)))) return false;

  std::vector<View> src(n), dst(n);
  const bool can_map = (descs[r].flags & kCanMap) != 0;
  bool copies = false;
  for (int p = 0; p < n; ++p) {
    if (p == r) {
      src[p] = own_view(send, bytes);
      dst[p] = own_view(recv, bytes);
      continue;
    }
    src[p] = view_of(c, p, descs[p], descs[p].send, bytes, can_map);
    dst[p] = view_of(c, p, descs[p], descs[p].recv, bytes, can_map);
    copies |= src[p].lo > 0 || src[p].hi < bytes || dst[p].lo > 0 || dst[p].hi < bytes;
  }
  // Our share, a chunk at a time: reduce in rank order into `acc` (operands
  // that are copied in land in `tmp` first), then store it everywhere.
  // Chunks stay in cache between the reads and the stores.
  const size_t chunk_bytes = copies ? c.tuning.cma_chunk : c.tuning.direct_chunk;
  thread_local std::vector<char> acc, tmp;
  acc.resize(chunk_bytes);
  tmp.resize(chunk_bytes);
  const size_t chunk = std::max<size_t>(1, chunk_bytes / es);
  const Segment seg = segment(count, n, r);
  const bool stream = bytes >= c.tuning.stream_from;
  for (size_t o = seg.off; o < seg.off + seg.len; o += chunk) {
    size_t m = std::min(chunk, seg.off + seg.len - o);
    size_t at = o * es, len = m * es;
    const char* a = fetch(src[0], at, len, acc.data());
    const char* b = fetch(src[1], at, len, tmp.data());
    reduce(acc.data(), a, b, m, call.dtype, call.op);
    for (int k = 2; k < n; ++k) reduce(acc.data(), acc.data(), fetch(src[k], at, len, tmp.data()), m, call.dtype, call.op);
    if (call.op == qcclAvg) finish_avg(acc.data(), m, call.dtype, n);
    for (int k = 0; k < n; ++k)
      store(dst[k], at, len, acc.data(), stream && dst[k].base != src[k].base);
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
  if (copies) ++c.direct_cma_calls;
  // Our share went through every peer's buffers: read from each, stored into each.
  const uint64_t moved = static_cast<uint64_t>(seg.len) * es * static_cast<uint64_t>(n - 1);
  c.bytes_received.fetch_add(moved, std::memory_order_relaxed);
  c.bytes_sent.fetch_add(moved, std::memory_order_relaxed);
  return true;
}

}  // namespace qccl
