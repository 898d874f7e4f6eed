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
#include "transport/shared_mem.h"
#include "qk/base/env.h"

namespace qccl {

namespace {

QK_ENV_INT(env_direct, "QCCL_DIRECT", 1,
           "1: all-reduces on qcclMemAlloc buffers of ranks on one host go direct (each rank "
           "reduces its share straight between the ranks' buffers); 0: never.");
// 64 KiB: the shared-buffer check costs a malloc'd all-reduce ~0.7 us there
// (7%) and nothing measurable from 256 KiB (docs/qccl.md "Shared buffers",
// the 2-core development VM).
QK_ENV_INT(env_direct_min, "QCCL_DIRECT_MIN_BYTES", 64 << 10,
           "Smallest all-reduce (bytes) that checks for shared buffers (QCCL_ALGO=direct: any size).");

// Elements are reduced a chunk at a time into a buffer that stays in cache,
// which is then stored into every rank's receive buffer (32 KiB: an L1 data
// cache; not measured against other sizes).
constexpr size_t kChunkBytes = 32 << 10;

// From this size results go out with non-temporal stores to receive buffers
// that are not also the send buffer: the buffers no longer fit in cache, and
// ordinary stores would first read every destination line (64 MiB, 2 ranks:
// 5.0 GB/s bus bandwidth with ordinary stores, 7.1 streamed). In place the
// lines were just read for the reduction, and streaming them is slower (8.6
// GB/s ordinary, 5.4 streamed; `qk perf all_reduce -R 1` on the 2-core
// development VM, Intel Xeon).
constexpr size_t kStreamFrom = 4 << 20;

enum : uint32_t { kShared = 1, kCanMap = 2 };

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

struct DirectDesc {
  uint32_t flags = 0;
  int32_t pid = 0;
  SharedRef send, recv;
};
static_assert(sizeof(DirectDesc) == 72);  // no padding: every byte on the wire is set

void describe(DirectDesc* d, const qcclComm& c, const void* send, const void* recv, size_t bytes) {
  *d = DirectDesc{};
  d->pid = static_cast<int32_t>(::getpid());
  auto s = find_shared(send, bytes), r = find_shared(recv, bytes);
  if (s && r) {
    d->flags |= kShared;
    d->send = *s;
    d->recv = *r;
  }
  bool maps = true;
  for (int p = 0; p < c.nranks; ++p)
    if (p != c.rank && !c.conns[p]->maps_peer_memory()) maps = false;
  if (maps) d->flags |= kCanMap;
}

char* mapped(qcclComm& c, int peer, const DirectDesc& d, const SharedRef& ref, size_t bytes) {
  const std::string who = c.peer_name(peer);
  QK_CHECK_AS(RemoteError, d.pid == c.conns[peer]->peer_pid(), who,
              " described shared buffers of pid ", d.pid, " instead of its own");
  QK_CHECK_AS(RemoteError, ref.offset <= ref.region_bytes && bytes <= ref.region_bytes - ref.offset,
              who, " described a shared buffer of ", bytes, " bytes at offset ", ref.offset,
              " in an allocation of ", ref.region_bytes);
  return c.peer_maps.map(d.pid, ref, who) + ref.offset;
}

}  // namespace

bool direct_candidate(const qcclComm& c, size_t bytes, bool forced) {
  if (c.nranks < 2 || env_direct.get() == 0) return false;
  if (!forced && bytes < static_cast<size_t>(std::max<int64_t>(0, env_direct_min.get()))) return false;
  for (const PeerInfo& p : c.peers)
    if (p.host_hash != c.peers[0].host_hash) return false;
  return true;
}

bool direct_all_reduce(Call& call, const char* send, char* recv, size_t count, size_t es) {
  qcclComm& c = call.comm;
  const int n = c.nranks, r = c.rank;
  const size_t bytes = count * es;
  std::vector<DirectDesc> descs(n);
  describe(&descs[r], c, send, recv, bytes);
  std::vector<Xfer> xs;
  xs.reserve(2 * (n - 1));
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    xs.push_back(Xfer::send(p, &descs[r], sizeof(DirectDesc)));
    xs.push_back(Xfer::recv(p, &descs[p], sizeof(DirectDesc)));
  }
  run(call, xs);
  for (const DirectDesc& d : descs)
    if (d.flags != (kShared | kCanMap)) return false;

  std::vector<const char*> src(n);
  std::vector<char*> dst(n);
  for (int p = 0; p < n; ++p) {
    src[p] = p == r ? send : mapped(c, p, descs[p], descs[p].send, bytes);
    dst[p] = p == r ? recv : mapped(c, p, descs[p], descs[p].recv, bytes);
  }
  // Our share, a chunk at a time: reduce in rank order into `acc`, store everywhere.
  thread_local std::vector<char> acc;
  acc.resize(kChunkBytes);
  const size_t chunk = kChunkBytes / es;
  const Segment seg = segment(count, n, r);
  const bool stream = bytes >= kStreamFrom;
  for (size_t o = seg.off; o < seg.off + seg.len; o += chunk) {
    size_t m = std::min(chunk, seg.off + seg.len - o);
    size_t at = o * es;
    reduce(acc.data(), src[0] + at, src[1] + at, m, call.dtype, call.op);
    for (int k = 2; k < n; ++k) reduce(acc.data(), acc.data(), src[k] + at, m, call.dtype, call.op);
    if (call.op == qcclAvg) finish_avg(acc.data(), m, call.dtype, n);
    for (int k = 0; k < n; ++k) {
      if (stream && dst[k] != src[k]) stream_copy(dst[k] + at, acc.data(), m * es);
      else std::memcpy(dst[k] + at, acc.data(), m * es);
    }
  }
#if defined(__x86_64__)
  if (stream) _mm_sfence();  // the streamed stores before the completion message
#endif
  // Done: every rank has stopped touching the others' buffers once it has
  // heard from all (the ring's release/acquire orders our stores before it).
  xs.clear();
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    xs.push_back(Xfer::send(p, nullptr, 0));
    xs.push_back(Xfer::recv(p, nullptr, 0));
  }
  run(call, xs);
  ++c.direct_calls;
  // Our share went through every peer's buffers: read from each, stored into each.
  const uint64_t moved = static_cast<uint64_t>(seg.len) * es * static_cast<uint64_t>(n - 1);
  c.bytes_received.fetch_add(moved, std::memory_order_relaxed);
  c.bytes_sent.fetch_add(moved, std::memory_order_relaxed);
  return true;
}

}  // namespace qccl
