// The MPI backend's overhead: qcclAllReduce with QCCL_BACKEND=mpi against
// MPI_Allreduce called directly, on the same buffers in the same run.
//
//   mpirun --allow-run-as-root --oversubscribe -np 4 qk_qccl_backend_mpi_bench [max_bytes] [iters]
//
// For each size it first checks that both give the same bits, then times
// blocks of `iters` calls, alternating the two so machine load hits both
// alike; a block's time is the slowest rank's; the median block is reported.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "qccl.h"
#include "backend/mpi.h"

namespace {

double block_us(int iters, bool direct, std::vector<float>& buf, size_t count, qcclComm_t comm) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    if (direct)
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (qcclAllReduce(buf.data(), buf.data(), count, qcclFloat32, qcclSum, comm, nullptr) != qcclSuccess)
      std::abort();
  }
  double us = (MPI_Wtime() - t0) / iters * 1e6, worst = 0;
  MPI_Allreduce(&us, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  setenv("QCCL_BACKEND", "mpi", 1);
  MPI_Init(&argc, &argv);
  size_t max_bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (16u << 20);
  int iters = argc > 2 ? std::atoi(argv[2]) : 20;
  const int kBlocks = 7;
  int rank = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  qcclComm_t comm = qk::qccl::init_from_mpi(MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("# MPI_Allreduce direct vs qcclAllReduce with QCCL_BACKEND=mpi: %d ranks, f32 sum in "
                "place, median of %d blocks of %d calls (slowest rank)\n"
                "# %10s %12s %12s %8s\n",
                n, kBlocks, iters, "bytes", "MPI (us)", "qccl (us)", "ratio");
  for (size_t bytes = 8; bytes <= max_bytes; bytes *= 8) {
    size_t count = bytes / 4;
    std::vector<float> a(count), b(count);
    for (size_t i = 0; i < count; ++i) a[i] = b[i] = static_cast<float>((rank * 7 + i) % 13);
    MPI_Allreduce(MPI_IN_PLACE, a.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (qcclAllReduce(b.data(), b.data(), count, qcclFloat32, qcclSum, comm, nullptr) != qcclSuccess ||
        std::memcmp(a.data(), b.data(), bytes) != 0) {
      std::fprintf(stderr, "rank %d: qccl and MPI results differ at %zu bytes\n", rank, bytes);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    block_us(iters, true, a, count, comm);  // warm-up
    block_us(iters, false, b, count, comm);
    std::vector<double> direct, via;
    for (int k = 0; k < kBlocks; ++k) {
      direct.push_back(block_us(iters, true, a, count, comm));
      via.push_back(block_us(iters, false, b, count, comm));
    }
    double d = median(direct), q = median(via);
    if (rank == 0) std::printf("  %10zu %12.2f %12.2f %8.3f\n", bytes, d, q, q / d);
  }
  qcclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
