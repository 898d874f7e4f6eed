/* Open MPI's MPI_Alltoallv timed like `qk perf alltoallv` (same blocks, same
 * sizes, busbw factor (n-1)/n, max time over ranks), for
 * bench/qccl_alltoallv_vs_mpi.sh.
 *
 *   mpicc -O2 qccl_mpi_alltoallv.c -o mpi_alltoallv
 *   mpirun -np 4 ./mpi_alltoallv 1024 67108864 4 20 5
 *   (min bytes, max bytes, factor, iterations, warmup)
 *
 * Blocks (as alltoallv_shares in include/qk/qccl/perf.h): each rank sends
 * `size` bytes of float in all, rank r giving rank j the share (2k+1)/n^2 of
 * the elements, k = (j - r) mod n, rounded down, the last share taking the
 * remainder; blocks packed in rank order. Checks one call per size before
 * timing and exits 2 on a wrong value. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static void shares(size_t count, int n, size_t* share) {
  size_t nn = (size_t)n * (size_t)n, given = 0;
  for (int k = 0; k < n - 1; ++k) {
    size_t w = 2 * (size_t)k + 1;
    share[k] = count / nn * w + count % nn * w / nn;
    given += share[k];
  }
  share[n - 1] = count - given;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (argc != 6) {
    if (rank == 0) fprintf(stderr, "usage: %s MINBYTES MAXBYTES FACTOR ITERS WARMUP\n", argv[0]);
    MPI_Finalize();
    return 1;
  }
  size_t lo = strtoull(argv[1], 0, 10), hi = strtoull(argv[2], 0, 10);
  int factor = atoi(argv[3]), iters = atoi(argv[4]), warmup = atoi(argv[5]);
  if (hi / sizeof(float) > 0x7fffffff) {
    if (rank == 0) fprintf(stderr, "MAXBYTES too large for MPI's int counts\n");
    MPI_Finalize();
    return 1;
  }
  float* in = malloc(hi + 64);
  float* out = malloc(hi + 64);
  size_t* share = malloc(n * sizeof(size_t));
  int* a = malloc(4 * n * sizeof(int));  /* send counts, send displs, recv counts, recv displs */
  int bad = 0;
  if (rank == 0) printf("# MPI_Alltoallv float, nranks %d\n#       size     time(us)  busbw(GB/s)\n", n);
  for (size_t sz = lo; sz <= hi; sz *= factor) {
    size_t count = sz / sizeof(float);
    shares(count, n, share);
    for (int j = 0; j < n; ++j) {
      a[j] = (int)share[(j - rank + n) % n];
      a[2 * n + j] = (int)share[(rank - j + n) % n];
      a[n + j] = j ? a[n + j - 1] + a[j - 1] : 0;
      a[3 * n + j] = j ? a[3 * n + j - 1] + a[2 * n + j - 1] : 0;
    }
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < a[j]; ++i) in[a[n + j] + i] = (float)((rank * 3 + j * 5 + i) % 61);
    MPI_Alltoallv(in, a, a + n, MPI_FLOAT, out, a + 2 * n, a + 3 * n, MPI_FLOAT, MPI_COMM_WORLD);
    for (int q = 0; q < n; ++q)
      for (int i = 0; i < a[2 * n + q]; ++i)
        if (out[a[3 * n + q] + i] != (float)((q * 3 + rank * 5 + i) % 61)) ++bad;
    for (int i = 0; i < warmup; ++i)
      MPI_Alltoallv(in, a, a + n, MPI_FLOAT, out, a + 2 * n, a + 3 * n, MPI_FLOAT, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i)
      MPI_Alltoallv(in, a, a + n, MPI_FLOAT, out, a + 2 * n, a + 3 * n, MPI_FLOAT, MPI_COMM_WORLD);
    double us = (MPI_Wtime() - t0) * 1e6 / iters, worst;
    MPI_Allreduce(&us, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double busbw = worst > 0 ? (double)(count * sizeof(float)) / worst / 1e3 * (n - 1) / n : 0;
    if (rank == 0) printf("  %10zu %12.2f %12.2f\n", count * sizeof(float), worst, busbw);
    fflush(stdout);
  }
  int all_bad = 0;
  MPI_Allreduce(&bad, &all_bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("# wrong values: %d\n", all_bad);
  free(in);
  free(out);
  free(share);
  free(a);
  MPI_Finalize();
  return all_bad ? 2 : 0;
}
