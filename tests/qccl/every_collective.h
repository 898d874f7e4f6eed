// One pass over every collective and point-to-point on a communicator, each
// checked bit for bit against the serial reference; sizes cross the TCP
// stripe (128 KiB) and the single-copy threshold. For tests that vary the
// set-up (sockets per peer, hosts) rather than the collectives.
#pragma once

#include <cstring>
#include <vector>

#include "data.h"
#include "ranks.h"

namespace qccl_test {

inline void check_every_collective(qcclComm_t comm, const Rank& me) {
  const int n = me.nranks;
  const size_t counts[] = {1, 1000, 65537, 300001};
  for (auto t : {qcclFloat32, qcclInt32, qcclBfloat16})
    for (auto op : {qcclSum, qcclMax, qcclAvg})
      for (size_t count : counts) {
        auto in = make_input(me.rank, count, op, t);
        auto want = reference(n, count, op, t);
        std::vector<char> out(in.size(), 0x5a);
        REQUIRE_OK(qcclAllReduce(in.data(), out.data(), count, t, op, comm, nullptr));
        std::string d = diff(out.data(), want.data(), count, t);
        REQUIRE(d.empty(), "allreduce ", qccl::dtype_name(t), " ", qccl::op_name(op), " count ", count, ": ", d);
      }
  for (size_t count : counts)
    for (int root = 0; root < n; ++root) {
      auto data = make_input(root, count, qcclSum, qcclFloat32, 5);
      std::vector<char> buf = me.rank == root ? data : std::vector<char>(data.size(), 0x33);
      REQUIRE_OK(qcclBroadcast(buf.data(), buf.data(), count, qcclFloat32, root, comm, nullptr));
      std::string d = diff(buf.data(), data.data(), count, qcclFloat32);
      REQUIRE(d.empty(), "broadcast root ", root, " count ", count, ": ", d);

      auto in = make_input(me.rank, count, qcclMin, qcclInt32);
      std::vector<char> out(in.size(), 0x11);
      REQUIRE_OK(qcclReduce(in.data(), out.data(), count, qcclInt32, qcclMin, root, comm, nullptr));
      if (me.rank == root) {
        auto want = reference(n, count, qcclMin, qcclInt32);
        d = diff(out.data(), want.data(), count, qcclInt32);
        REQUIRE(d.empty(), "reduce min root ", root, " count ", count, ": ", d);
      }
    }
  for (size_t count : counts) {
    size_t es = 2;  // float16
    std::vector<char> want(count * es * n + 1);
    for (int r = 0; r < n; ++r) {
      auto blk = make_input(r, count, qcclSum, qcclFloat16, 3);
      std::memcpy(want.data() + r * count * es, blk.data(), count * es);
    }
    auto mine = make_input(me.rank, count, qcclSum, qcclFloat16, 3);
    std::vector<char> out(want.size(), 0x77);
    REQUIRE_OK(qcclAllGather(mine.data(), out.data(), count, qcclFloat16, comm, nullptr));
    std::string d = diff(out.data(), want.data(), count * n, qcclFloat16);
    REQUIRE(d.empty(), "allgather count ", count, ": ", d);

    auto in = make_input(me.rank, count * n, qcclProd, qcclFloat32);
    auto full = reference(n, count * n, qcclProd, qcclFloat32);
    std::vector<char> part(count * 4 + 1, 0x66);
    REQUIRE_OK(qcclReduceScatter(in.data(), part.data(), count, qcclFloat32, qcclProd, comm, nullptr));
    d = diff(part.data(), full.data() + me.rank * count * 4, count, qcclFloat32);
    REQUIRE(d.empty(), "reducescatter count ", count, ": ", d);

    std::vector<int32_t> a2a(count * n), got(count * n, -1);
    for (int dst = 0; dst < n; ++dst)
      for (size_t i = 0; i < count; ++i) a2a[dst * count + i] = static_cast<int32_t>(me.rank * 1000003 + dst * 1009 + i);
    REQUIRE_OK(qcclAllToAll(a2a.data(), got.data(), count, qcclInt32, comm, nullptr));
    for (int src = 0; src < n; ++src)
      for (size_t i = 0; i < count; ++i)
        REQUIRE(got[src * count + i] == static_cast<int32_t>(src * 1000003 + me.rank * 1009 + i),
                "alltoall count ", count, " block from rank ", src, " element ", i);
  }
  // A ring of sends and receives in one group.
  for (size_t count : counts) {
    int next = (me.rank + 1) % n, prev = (me.rank + n - 1) % n;
    std::vector<int32_t> s(count), r(count, -1);
    for (size_t i = 0; i < count; ++i) s[i] = static_cast<int32_t>(me.rank * 7919 + i);
    REQUIRE_OK(qcclGroupStart());
    REQUIRE_OK(qcclSend(s.data(), count, qcclInt32, next, comm, nullptr));
    REQUIRE_OK(qcclRecv(r.data(), count, qcclInt32, prev, comm, nullptr));
    REQUIRE_OK(qcclGroupEnd());
    for (size_t i = 0; i < count; ++i)
      REQUIRE(r[i] == static_cast<int32_t>(prev * 7919 + i), "send/recv count ", count, " element ", i);
  }
}

// FNV-1a of a buffer, to compare results across runs and ranks.
inline uint64_t fnv1a(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
  return h;
}

}  // namespace qccl_test
